// libFuzzer target: a checkpoint's config.json as nibble reads it (the budgeted parser into both
// DOM flavours, then the quantization config inside it). Any text must either be refused with
// nibble::Error, whose message is printable, or parse; nothing may crash, hang or blow up memory
// (scripts/fuzz runs it under a memory limit).
#include <nibble/error.hpp>
#include <nibble/quant_config.hpp>
#include <nibble/untrusted_text.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "json/untrusted_json.hpp"

namespace {

// A message that still holds a control byte or invalid UTF-8 is a finding.
void check_printable(const nibble::Error& e) {
  const std::string_view m = e.what();
  if (!nibble::is_valid_utf8(m)) std::abort();
  for (unsigned char c : m) {
    if (c < 0x20 || c == 0x7F) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    nlohmann::json doc = nibble::detail::parse_json(text, "config.json");
    (void)doc.dump();
  } catch (const nibble::Error& e) {
    check_printable(e);
  }
  try {
    auto doc = nibble::detail::parse_json<nlohmann::ordered_json>(text, "config.json");
    if (doc.is_object() && doc.contains("quantization_config")) {
      nibble::QuantConfig config =
          nibble::parse_quant_config(doc["quantization_config"], "config.json");
      (void)config.for_module("model.layers.0.mlp.experts.0.gate_proj");
      (void)config.to_json().dump();
    }
  } catch (const nibble::Error& e) {
    check_printable(e);
  }
  return 0;
}
