// Parsing JSON that comes from outside (safetensors headers, shard indexes, config.json, quantize
// configs, --config files) with a budget: nesting depth and the number of values are bounded,
// duplicate keys and anything after the document (a NUL included) are refused, the time is
// linear in the text, and every message names the document and the byte offset of the defect.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

namespace nibble::detail {

/// Deepest nesting of [ and { accepted in a JSON document.
inline constexpr int kMaxJsonDepth = 64;
/// Most values (scalars, arrays and objects together) in a config-like document.
inline constexpr size_t kMaxJsonValues = size_t(1) << 20;

/// A pointer into the text that also records how far the parser has read, so that SAX handlers
/// can name the offset of what they refuse (nlohmann reports positions only for syntax errors).
class TrackedChars {
 public:
  using iterator_category = std::forward_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;

  TrackedChars() = default;
  TrackedChars(const char* p, const char** reached) : p_(p), reached_(reached) {}
  const char& operator*() const { return *p_; }
  TrackedChars& operator++() {
    *reached_ = ++p_;
    return *this;
  }
  TrackedChars operator++(int) {
    TrackedChars old = *this;
    ++*this;
    return old;
  }
  bool operator==(const TrackedChars& o) const { return p_ == o.p_; }
  bool operator!=(const TrackedChars& o) const { return p_ != o.p_; }

 private:
  const char* p_ = nullptr;
  const char** reached_ = nullptr;
};

/// Throw nibble::Error (naming `what`, already escaped) when the document nests deeper than
/// kMaxJsonDepth; brackets inside strings are skipped, malformed text is left to the parser.
void check_json_depth(std::string_view text, const std::string& what);

/// Throw nibble::Error (naming `what`, already escaped) when `text` holds a NUL byte: nlohmann
/// stops at one, so text after it would otherwise be ignored.
void refuse_nul(std::string_view text, const std::string& what);

/// The escaped message of a nlohmann parse error (its "last read" echoes the input's bytes).
std::string json_error_text(const std::exception& e);

/// Parse untrusted JSON text into a DOM (nlohmann::json or nlohmann::ordered_json, the latter in
/// linear time too); `what` names the document in messages and must already be escaped. Throws
/// nibble::Error on invalid JSON, a NUL, a duplicate key, nesting deeper than kMaxJsonDepth or
/// more than `max_values` values. With `keep_top_level`, only those keys of a top-level object
/// are built; the other values are checked and counted but not kept (a checkpoint's config.json
/// may be large, the part a parser needs is not).
template <class Json = nlohmann::json>
Json parse_json(std::string_view text, const std::string& what, size_t max_values = kMaxJsonValues,
                const std::vector<std::string>* keep_top_level = nullptr);

}  // namespace nibble::detail
