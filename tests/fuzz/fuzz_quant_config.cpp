// libFuzzer target: the quantization config parser must reject any text with nibble::Error or
// accept it with a config that resolves modules and serialises back.
#include <nibble/error.hpp>
#include <nibble/quant_config.hpp>

#include <cstddef>
#include <cstdint>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    nibble::QuantConfig config = nibble::parse_quant_config_text(text, "fuzz.json");
    (void)config.for_module("model.layers.0.mlp.experts.0.gate_proj");
    (void)config.to_json().dump();
  } catch (const nibble::Error&) {
  }
  return 0;
}
