// Checked reading of a plugin's own environment variables (NIBBLE_<PLUGIN>_...): the whole value
// must be a decimal integer inside the plugin's range, or it is ignored with a warning through
// the host's log, so a typo never turns into a wrapped or absurd setting. Plugins cannot link
// libnibble, so this is the SDK's header-only counterpart of nibble::parse_integer. C++17.
#pragma once

#include <nibble/sdk/plugin.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

namespace nibble::sdk {

/// The integer `text` spells (optional sign, decimal digits, nothing else) if it lies in
/// [lo, hi]; nullopt for anything else, overflow included.
inline std::optional<int64_t> parse_integer_in(const char* text, int64_t lo, int64_t hi) {
  if (!text) return std::nullopt;
  const char* p = text;
  const bool negative = *p == '-';
  if (*p == '-' || *p == '+') ++p;
  if (*p == '\0') return std::nullopt;
  // Accumulate the magnitude as unsigned: it cannot overflow before the digit count does.
  uint64_t magnitude = 0;
  const uint64_t limit = negative ? uint64_t(INT64_MAX) + 1 : uint64_t(INT64_MAX);
  for (; *p; ++p) {
    if (*p < '0' || *p > '9') return std::nullopt;
    const uint64_t digit = uint64_t(*p - '0');
    if (magnitude > (limit - digit) / 10) return std::nullopt;
    magnitude = magnitude * 10 + digit;
  }
  const int64_t value =
      negative ? (magnitude == uint64_t(INT64_MAX) + 1 ? INT64_MIN : -int64_t(magnitude))
               : int64_t(magnitude);
  if (value < lo || value > hi) return std::nullopt;
  return value;
}

/// `text` with every byte outside printable ASCII as \xNN, for echoing a value in a message.
inline std::string printable(const char* text, size_t max_chars = 64) {
  std::string out;
  for (const char* p = text; *p && out.size() < max_chars; ++p) {
    const unsigned char c = static_cast<unsigned char>(*p);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += char(c);
    } else {
      char hex[5];
      std::snprintf(hex, sizeof hex, "\\x%02X", c);
      out += hex;
    }
  }
  return out;
}

/// The environment variable `name` as an integer in [lo, hi]; nullopt when it is unset or empty,
/// and also (after a warning through the host's log naming the variable, its value and the
/// range) when it is not such a number.
inline std::optional<int64_t> env_integer(const char* name, int64_t lo, int64_t hi) {
  const char* text = std::getenv(name);
  if (!text || !*text) return std::nullopt;
  if (auto v = parse_integer_in(text, lo, hi)) return v;
  Host::log(NIBBLE_LOG_WARNING, std::string(name) + "='" + printable(text) +
                                    "' is not a whole number in [" + std::to_string(lo) + ", " +
                                    std::to_string(hi) + "]; ignored");
  return std::nullopt;
}

}  // namespace nibble::sdk
