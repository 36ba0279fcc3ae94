// One status check for every call a host makes into a plugin: a status other than NIBBLE_OK
// becomes a host::CallError carrying the status, the ABI function's name and the plugin's own
// message, and a C++ exception that crosses the C ABI (a plugin bug) becomes one too, so no caller
// needs a switch over statuses or a try block of its own. Header-only.
#pragma once

#include <nibble/sdk/plugin.h>

#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>
#include <utility>

namespace nibble::sdk::host {

/// A call into a plugin that failed: its status, the ABI function and the plugin's message.
class CallError : public std::runtime_error {
 public:
  /// `call` names the ABI function ("prepare"); `message` is what the plugin said ("" if nothing).
  CallError(nibble_status status, std::string call, std::string message, bool escaped = false)
      : std::runtime_error(call + " failed (" + nibble_status_name(status) +
                           "): " + (message.empty() ? std::string("no message") : message)),
        status_(status),
        call_(std::move(call)),
        message_(std::move(message)),
        escaped_(escaped) {}
  /// The status the plugin returned (NIBBLE_INTERNAL for an escaped exception).
  nibble_status status() const { return status_; }
  /// The ABI function that failed.
  const std::string& call() const { return call_; }
  /// The plugin's own message, "" when it left none.
  const std::string& message() const { return message_; }
  /// Whether a C++ exception crossed the C ABI (rather than a status coming back).
  bool escaped() const { return escaped_; }

 private:
  nibble_status status_;
  std::string call_;
  std::string message_;
  bool escaped_;
};

/// A caller-owned nibble_error with the full capacity.
struct ErrorBuffer {
  nibble_error error{};
  ErrorBuffer() { error.struct_size = sizeof error; }
  /// The pointer to hand to the plugin.
  nibble_error* get() { return &error; }
  /// The message, bounded by the buffer even when the plugin forgot the terminator.
  std::string text() const {
    return std::string(error.message, strnlen(error.message, sizeof error.message));
  }
};

/// Throw CallError unless `status` is NIBBLE_OK; `call` names the ABI function.
inline void check(nibble_status status, const char* call, const ErrorBuffer& error) {
  if (status != NIBBLE_OK) throw CallError(status, call, error.text());
}

/// Run f(), one call into a plugin; an exception escaping it becomes an escaped CallError of
/// `call`.
template <class F>
auto guard(const char* call, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const std::exception& e) {
    throw CallError(NIBBLE_INTERNAL, call,
                    std::string(call) + " threw a C++ exception across the C ABI: " + e.what(),
                    true);
  } catch (...) {
    throw CallError(NIBBLE_INTERNAL, call,
                    std::string(call) + " threw a non-standard C++ exception across the C ABI",
                    true);
  }
}

/// guard() and check() together: run a status-returning call and throw unless it returned OK.
template <class F>
void call_checked(const char* call, ErrorBuffer& error, F&& f) {
  check(guard(call, f), call, error);
}

/// Run f() for a host that reports statuses instead of throwing: NIBBLE_OK, or the status of the
/// CallError f threw, with the plugin's message (or the escaped exception's text) in *message.
template <class F>
nibble_status status_of(F&& f, std::string* message = nullptr) {
  try {
    f();
    return NIBBLE_OK;
  } catch (const CallError& e) {
    if (message) *message = e.message();
    return e.status();
  }
}

}  // namespace nibble::sdk::host
