// nibble::Error, the one exception type the core throws: a message that names the file, tensor,
// layer, plugin or option involved and what was expected versus found.
#pragma once

#include <nibble/export.hpp>

#include <stdexcept>
#include <string>

namespace nibble {

/// A failure with its context in the message.
class NIBBLE_API Error : public std::runtime_error {
 public:
  /// An error with a complete message.
  explicit Error(const std::string& message) : std::runtime_error(message) {}
  /// The same error with `context` ("while loading layer X") prepended.
  Error with_context(const std::string& context) const { return Error(context + ": " + what()); }
};

}  // namespace nibble
