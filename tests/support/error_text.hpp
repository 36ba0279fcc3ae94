// The text of the error a call throws, for tests that check what a refusal says.
#pragma once

#include <nibble/error.hpp>

#include <exception>
#include <functional>
#include <string>

namespace nibble::test {

/// What `f` throws as a nibble::Error; "" when it returns; any other exception is named as such.
inline std::string error_text(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("not a nibble::Error: ") + e.what();
  }
  return "";
}

}  // namespace nibble::test
