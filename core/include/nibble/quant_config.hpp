// A checkpoint's quantization configuration: config.json's `quantization_config`, or
// `quantize_config.json` (AutoGPTQ/GPTQModel) / `quant_config.json` (AutoAWQ), with the key
// synonyms, GPTQModel's `meta` nesting, `modules_to_not_convert`, `dynamic` and `lm_head`.
#pragma once

#include <nibble/export.hpp>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace re2 {
class RE2;
}

namespace nibble {

/// The quantization algorithm a checkpoint was written by.
enum class QuantMethod { Gptq, Awq };

/// "gptq" or "awq".
NIBBLE_API std::string_view quant_method_name(QuantMethod method);

/// How one module is quantized once `modules_to_not_convert` and `dynamic` are applied.
struct ModuleQuant {
  bool quantized = true;  ///< false: the module is left dense
  int bits = 4;
  int group_size = 128;
  bool sym = true;
  bool desc_act = false;
  std::string reason;  ///< why it differs from the global config ("dynamic rule X", ...), or ""
};

/// One GPTQModel `dynamic` rule: a regex matched at the start of a module name (Python re.match).
struct DynamicRule {
  std::string pattern;  ///< the regex without its "+:"/"-:" prefix
  bool skip = false;    ///< "-:" rule: matching modules are not quantized
  std::optional<int> bits;
  std::optional<int> group_size;
  std::optional<bool> sym;
  std::optional<bool> desc_act;
  /// The compiled pattern (RE2: linear-time matching, so a hostile config cannot stall loading).
  std::shared_ptr<const re2::RE2> regex;
};

/// The parsed, validated configuration. Anything nibble cannot honour is refused at parse time.
struct NIBBLE_API QuantConfig {
  QuantMethod method = QuantMethod::Gptq;
  int bits = 4;
  int group_size = 128;  ///< > 0 or -1
  bool sym = true;       ///< GPTQ `sym`; AWQ: !zero_point (always false: GEMM needs zeros)
  bool desc_act = false;
  bool static_groups = false;    ///< informational (top level or GPTQModel `meta`)
  bool true_sequential = false;  ///< informational
  /// GPTQ: "gptq" (v1) or "gptq_v2". AWQ: the version, "gemm".
  std::string checkpoint_format = "gptq";
  bool lm_head = false;                             ///< the lm_head is quantized too
  std::vector<std::string> modules_to_not_convert;  ///< substrings of module names left dense
  std::vector<DynamicRule> dynamic;                 ///< GPTQModel per-module overrides, in order
  std::string source;  ///< the file it was read from, escaped for messages

  /// The effective quantization of module `prefix` (e.g. "model.layers.0.mlp.down_proj").
  ModuleQuant for_module(std::string_view prefix) const;
  /// The `quantization_config` object a writer puts in config.json for this config.
  nlohmann::ordered_json to_json() const;
};

/// Parse a `quantization_config` object (or a quantize_config.json / quant_config.json
/// document); `source` (already escaped) names it in messages. Throws nibble::Error naming the key,
/// the value found and the supported values for anything unsupported (bits 2/3, marlin, bitblas,
/// gemv, ...).
NIBBLE_API QuantConfig parse_quant_config(const nlohmann::ordered_json& object,
                                          const std::string& source);

/// Parse JSON text: a config.json (its `quantization_config` is used) or a bare quantization
/// config. Throws nibble::Error on invalid JSON, too-deep nesting, or a config without one.
NIBBLE_API QuantConfig parse_quant_config_text(std::string_view text, const std::string& source);

/// The quantization config of checkpoint directory `dir`: config.json's `quantization_config`,
/// else quantize_config.json, else quant_config.json; nullopt when none exists (a dense model).
/// When several exist they must agree on method, bits, group size, sym and format.
NIBBLE_API std::optional<QuantConfig> load_quant_config(const std::filesystem::path& dir);

}  // namespace nibble
