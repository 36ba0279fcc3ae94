// Checked parsing of numbers that come from outside (flags, environment variables, config files,
// checkpoint headers): the whole text must be the number and it must lie in the accepted range,
// or nibble::Error says which option, what it got and the range it accepts.
#pragma once

#include <nibble/export.hpp>

#include <cstdint>
#include <string>
#include <string_view>

namespace nibble {

/// The integer `text` spells (optional sign, decimal digits, nothing else), if it lies in
/// [lo, hi]; otherwise an Error "<what>: '<text>' is not a whole number in [lo, hi]".
NIBBLE_API int64_t parse_integer(std::string_view text, int64_t lo, int64_t hi,
                                 const std::string& what);

/// The finite real number `text` spells, if it lies in [lo, hi]; otherwise an Error naming `what`.
NIBBLE_API double parse_real(std::string_view text, double lo, double hi, const std::string& what);

}  // namespace nibble
