// nibble::Error, the exception type the core throws: a message that names the file, tensor,
// layer, plugin or option involved and what was expected versus found. Its subclasses say what
// kind of failure it is, so a host (or a language binding) can react without reading the text;
// a plain nibble::Error is any other failure (a plugin's internal error, out of memory, I/O).
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

/// The caller passed something wrong: a tensor's shape, dtype, device or layout, an option's
/// value, or the name of a layer the checkpoint does not have (ABI status INVALID_ARGUMENT).
class NIBBLE_API InvalidArgument : public Error {
 public:
  using Error::Error;
};

/// A valid request that no selected kernel implements: no kernel accepts the layer, or every
/// one that accepted it refused its weight (ABI status UNSUPPORTED).
class NIBBLE_API Unsupported : public Error {
 public:
  using Error::Error;
};

/// The backend asked for is not loaded, or cannot run on this machine (its probe says why; ABI
/// status UNAVAILABLE).
class NIBBLE_API Unavailable : public Error {
 public:
  using Error::Error;
};

/// A checkpoint's files cannot be read as a model: malformed or truncated safetensors, missing
/// or inconsistent tensors, a configuration nibble does not read (3-bit weights, say).
class NIBBLE_API CheckpointError : public Error {
 public:
  using Error::Error;
};

}  // namespace nibble
