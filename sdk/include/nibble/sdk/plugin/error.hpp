// How errors cross the plugin ABI: a plugin throws sdk::PluginError (or any exception), and the C
// glue turns it into a nibble_status plus a message in the caller's nibble_error.
#pragma once

#include <nibble/sdk/plugin.h>

#include <algorithm>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>

namespace nibble::sdk {

/// An error a plugin throws; it crosses the ABI as `status` with `what()` as the message.
class PluginError : public std::runtime_error {
 public:
  /// An error with a status code and a message.
  PluginError(nibble_status status, const std::string& message)
      : std::runtime_error(message), status_(status) {}
  /// The status reported to the host.
  nibble_status status() const { return status_; }

 private:
  nibble_status status_;
};

/// PluginError's former name, kept so that existing plugins compile.
using Error [[deprecated("use nibble::sdk::PluginError")]] = PluginError;

/// Throw INVALID_ARGUMENT with `message` unless `condition` holds.
inline void require(bool condition, const std::string& message) {
  if (!condition) throw PluginError(NIBBLE_INVALID_ARGUMENT, message);
}

/// Copy `text` into a caller-owned nibble_error, respecting its declared capacity.
inline void write_error(nibble_error* error, const std::string& text) {
  if (!error || error->struct_size <= offsetof(nibble_error, message)) return;
  size_t capacity = std::min<size_t>(error->struct_size - offsetof(nibble_error, message),
                                     NIBBLE_ERROR_MESSAGE_CAPACITY);
  size_t n = std::min(text.size(), capacity - 1);
  std::memcpy(error->message, text.data(), n);
  error->message[n] = '\0';
}

/// Whether a field at `offset` of `size` bytes lies inside a struct of `struct_size` bytes.
constexpr bool has_field(uint32_t struct_size, size_t offset, size_t size) {
  return offset + size <= struct_size;
}

namespace detail {

// Run f, turning every exception into a status and a message.
template <class F>
nibble_status guarded(nibble_error* error, F&& f) {
  try {
    f();
    return NIBBLE_OK;
  } catch (const PluginError& e) {
    write_error(error, e.what());
    return e.status();
  } catch (const std::bad_alloc&) {
    write_error(error, "out of memory");
    return NIBBLE_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    write_error(error, std::string("internal error: ") + e.what());
    return NIBBLE_INTERNAL;
  } catch (...) {
    write_error(error, "internal error: unknown exception");
    return NIBBLE_INTERNAL;
  }
}

}  // namespace detail
}  // namespace nibble::sdk
