// Guards shared by the parsers of untrusted JSON (safetensors headers, index files, configs):
// nlohmann's recursive parser has no depth limit, so nesting is measured before parsing.
#pragma once

#include <nibble/error.hpp>

#include <nlohmann/json.hpp>

#include <cstddef>
#include <string>
#include <string_view>

namespace nibble::detail {

/// Deepest nesting of [ and { accepted in a JSON document.
inline constexpr int kMaxJsonDepth = 64;

/// Throw nibble::Error (naming `what`) when the document nests deeper than kMaxJsonDepth. Brackets
/// inside strings are skipped; malformed text is left for the parser to reject.
inline void check_json_depth(std::string_view text, const std::string& what) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) {
        throw Error(what + ": JSON nests deeper than " + std::to_string(kMaxJsonDepth) +
                    " levels; refusing to parse it");
      }
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
}

/// Parse untrusted JSON text (depth-checked); throws nibble::Error naming `what` when invalid.
template <class Json = nlohmann::json>
Json parse_json(std::string_view text, const std::string& what) {
  check_json_depth(text, what);
  Json parsed = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) {
    // Parse again with exceptions only to obtain the position of the defect for the message.
    try {
      Json again = Json::parse(text.begin(), text.end());
      (void)again;
    } catch (const std::exception& e) {
      throw Error(what + ": not valid JSON (" + e.what() + ")");
    }
    throw Error(what + ": not valid JSON");
  }
  return parsed;
}

}  // namespace nibble::detail
