// The safetensors header parser: a SAX handler that keeps only what the format defines (tensor
// entries and the __metadata__ string map), so memory follows the tensors the header lists rather
// than the JSON values it holds, and every defect is named with its byte offset in the file.
#pragma once

#include <nibble/safetensors.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace nibble::detail {

/// One tensor entry as the header states it (offsets relative to the data section).
struct HeaderEntry {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;
  uint64_t nbytes = 0;  ///< dtype size x elements, checked against the offsets
  uint64_t key_at = 0;  ///< byte offset in the file just past the entry's name
};

/// What a header holds.
struct ParsedHeader {
  std::vector<HeaderEntry> tensors;  ///< in header order
  std::map<std::string, std::string> metadata;
};

/// Parse and check the header JSON `text` of safetensors file `label` (escaped, for messages):
/// one object of tensor entries and an optional __metadata__ object of strings; no duplicate
/// keys, nothing after the object but spaces, shapes that fit in int64 and offsets that span
/// exactly dtype x shape bytes. Data-section coverage is checked by the caller.
ParsedHeader parse_safetensors_header(std::string_view text, const std::string& label);

}  // namespace nibble::detail
