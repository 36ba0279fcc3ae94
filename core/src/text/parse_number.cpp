#include "nibble/parse_number.hpp"

#include "nibble/error.hpp"
#include "nibble/untrusted_text.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace nibble {
namespace {

std::string range_text(double lo, double hi) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "[%g, %g]", lo, hi);
  return buf;
}

}  // namespace

int64_t parse_integer(std::string_view text, int64_t lo, int64_t hi, const std::string& what) {
  std::string_view digits = text;
  if (!digits.empty() && digits.front() == '+') digits.remove_prefix(1);
  int64_t value = 0;
  const char* end = digits.data() + digits.size();
  const auto [ptr, ec] = std::from_chars(digits.data(), end, value);
  if (digits.empty() || ec != std::errc() || ptr != end || value < lo || value > hi)
    throw InvalidArgument(what + ": " + quoted_untrusted(text) + " is not a whole number in [" +
                          std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return value;
}

double parse_real(std::string_view text, double lo, double hi, const std::string& what) {
  const std::string s(text);
  char* end = nullptr;
  const double value = s.empty() ? 0.0 : std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(value) || value < lo || value > hi)
    throw InvalidArgument(what + ": " + quoted_untrusted(text) + " is not a number in " +
                          range_text(lo, hi));
  return value;
}

}  // namespace nibble
