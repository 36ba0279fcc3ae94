// How messages show a name that comes from a file (tensor, layer, shard, config key): escaped,
// unquoted as messages always showed names, and cut short when a hostile file makes it huge.
#pragma once

#include <nibble/untrusted_text.hpp>

#include <string>
#include <string_view>

namespace nibble::detail {

/// `name` escaped (escape_untrusted) and cut to 256 characters of the result.
inline std::string name_text(std::string_view name) { return escape_untrusted(name, 256); }

}  // namespace nibble::detail
