#include "nibble/untrusted_text.hpp"

#include <cstdint>
#include <cstdio>

namespace nibble {
namespace {

// Length of the valid UTF-8 sequence at s[i] and its code point, or 0 where the bytes there are
// not one (truncated, overlong, a surrogate, past U+10FFFF, a stray continuation byte).
size_t utf8_sequence(std::string_view s, size_t i, uint32_t* cp) {
  const auto b = [&](size_t k) { return static_cast<uint8_t>(s[i + k]); };
  const uint8_t c = b(0);
  size_t len;
  uint32_t v, min;
  if (c < 0x80) {
    *cp = c;
    return 1;
  } else if ((c & 0xE0) == 0xC0) {
    len = 2, v = c & 0x1F, min = 0x80;
  } else if ((c & 0xF0) == 0xE0) {
    len = 3, v = c & 0x0F, min = 0x800;
  } else if ((c & 0xF8) == 0xF0) {
    len = 4, v = c & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (i + len > s.size()) return 0;
  for (size_t k = 1; k < len; ++k) {
    if ((b(k) & 0xC0) != 0x80) return 0;
    v = (v << 6) | (b(k) & 0x3F);
  }
  if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
  *cp = v;
  return len;
}

// Code points that are valid but must not reach a terminal as they are: C1 controls and the
// characters that reorder or hide text (line/paragraph separators, bidi marks and overrides,
// the byte-order mark).
bool hidden_or_control(uint32_t cp) {
  return (cp >= 0x80 && cp <= 0x9F) || cp == 0x2028 || cp == 0x2029 || cp == 0x200E ||
         cp == 0x200F || (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069) ||
         cp == 0xFEFF;
}

void append_escaped(std::string& out, std::string_view s, size_t i, size_t* consumed) {
  const uint8_t c = static_cast<uint8_t>(s[i]);
  char buf[16];
  if (c == '\\') {
    out += "\\\\";
    *consumed = 1;
    return;
  }
  if (c >= 0x20 && c < 0x7F) {
    out += char(c);
    *consumed = 1;
    return;
  }
  uint32_t cp = 0;
  const size_t len = c < 0x80 ? 0 : utf8_sequence(s, i, &cp);
  if (len == 0) {
    std::snprintf(buf, sizeof buf, "\\x%02X", c);
    out += buf;
    *consumed = 1;
  } else if (hidden_or_control(cp)) {
    std::snprintf(buf, sizeof buf, "\\u{%04X}", unsigned(cp));
    out += buf;
    *consumed = len;
  } else {
    out.append(s.substr(i, len));
    *consumed = len;
  }
}

}  // namespace

std::string escape_untrusted(std::string_view s) { return escape_untrusted(s, std::string::npos); }

std::string escape_untrusted(std::string_view s, size_t max_chars) {
  std::string out;
  out.reserve(s.size() < 256 ? s.size() : 256);
  size_t i = 0;
  while (i < s.size()) {
    if (out.size() >= max_chars) {
      out += "... (" + std::to_string(s.size()) + " bytes)";
      return out;
    }
    size_t n = 1;
    append_escaped(out, s, i, &n);
    i += n;
  }
  return out;
}

std::string quoted_untrusted(std::string_view s) { return "'" + escape_untrusted(s, 200) + "'"; }

bool is_valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    uint32_t cp;
    const size_t n = utf8_sequence(s, i, &cp);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

}  // namespace nibble
