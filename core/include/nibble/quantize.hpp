// Round-to-nearest quantization into the canonical weight, and writing checkpoints in the Hugging
// Face layout (config.json + model.safetensors, or shards) as GPTQ v1, GPTQ v2 or AWQ GEMM: from
// float weights, from an f16/bf16/f32 safetensors checkpoint, or from a synthetic description.
#pragma once

#include <nibble/canonical_weight.hpp>
#include <nibble/checkpoint_scheme.hpp>
#include <nibble/export.hpp>
#include <nibble/quant_config.hpp>
#include <nibble/safetensors.hpp>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace nibble {

/// How to quantize.
struct QuantizeOptions {
  int bits = 4;          ///< 4 or 8
  int group_size = 128;  ///< > 0, or -1 for one group per output channel
  bool sym = true;       ///< symmetric: every zero point is 2^(bits-1)
  /// Act-order: groups are formed along a random permutation of K (as GPTQ forms them along the
  /// Hessian order), giving a non-identity g_idx. No effect with group_size -1.
  bool act_order = false;
  /// Smallest zero point the quantizer may choose. GPTQ v1 stores zero - 1 and cannot hold 0,
  /// so the v1 writer uses 1 (asymmetric only; costs at most one step at the group's maximum).
  int min_zero = 0;
  DLDataType scales_dtype{kDLFloat, 16, 1};  ///< the stored scale type (f16 as GPTQ writes)
  /// Called after each layer a model-level quantizer finishes (layer prefix, layers done, layers
  /// in all), for progress displays; may be empty.
  std::function<void(const std::string&, size_t, size_t)> on_layer = nullptr;
};

/// Quantize `weight` ([N][K] row-major) to nearest; scales are rounded to options.scales_dtype
/// first and the codes computed with the rounded scale. `rng` draws the act-order permutation.
/// `bias` ([N], optional) is stored as f16. Throws nibble::Error on invalid options.
NIBBLE_API CanonicalWeight quantize_rtn(std::span<const float> weight, int64_t N, int64_t K,
                                        const QuantizeOptions& options, std::mt19937_64& rng,
                                        std::span<const float> bias = {});

/// A model ready to be written: quantized layers and every other tensor as is.
struct QuantizedModel {
  std::map<std::string, CanonicalWeight> quantized;                  ///< layer prefix -> weight
  std::map<std::string, OwnedTensor> plain;                          ///< full tensor name -> tensor
  nlohmann::ordered_json config = nlohmann::ordered_json::object();  ///< config.json sans quant
  std::vector<std::string>
      modules_to_not_convert;      ///< dense layers a reader must not expect quantized
  std::vector<std::string> notes;  ///< what the quantizer decided and why
};

/// The quantization config a writer records for `format` and `options`.
NIBBLE_API QuantConfig make_quant_config(SchemeKind format, const QuantizeOptions& options);

/// Write `model` to directory `out` (created if needed): config.json with quantization_config
/// and model.safetensors, or, with shard_bytes > 0, shards of about that size plus
/// model.safetensors.index.json. Each quantized layer is encoded by the scheme of `format`.
NIBBLE_API void write_checkpoint(const std::filesystem::path& out, const QuantizedModel& model,
                                 SchemeKind format, const QuantizeOptions& options,
                                 uint64_t shard_bytes = 0);

/// A synthetic MoE block (Qwen naming): E experts, hidden K, intermediate I, top-k routing.
struct SyntheticMoe {
  int num_experts = 8;
  int64_t hidden = 256;
  int64_t intermediate = 384;
  int top_k = 2;
};

/// A synthetic model: linear layers model.layers.{i}.linear of shape (K, N), optionally a MoE
/// block model.layers.{L}.mlp with an f16 router mlp.gate, weights ~ N(0, 1/K) from `seed`.
struct SyntheticSpec {
  std::vector<std::pair<int64_t, int64_t>> layers;  ///< (K, N) per linear layer
  std::optional<SyntheticMoe> moe;
  bool bias = false;  ///< linear layers get an f16 bias ~ N(0, 0.01)
  uint64_t seed = 0;
};

/// Generate and quantize a synthetic model (options.min_zero is set from `format`).
NIBBLE_API QuantizedModel make_synthetic_model(const SyntheticSpec& spec, QuantizeOptions options,
                                               SchemeKind format);

/// Quantize an unquantized f16/bf16/f32 checkpoint: every 2-D `*.weight` of a linear layer and
/// of MoE experts, except routers, embeddings, norms, the lm_head and modules whose name contains
/// one of `skip`. A layer the format cannot pack (e.g. GPTQ K % 8) stays dense, with a note.
NIBBLE_API QuantizedModel quantize_checkpoint(const std::filesystem::path& in,
                                              QuantizeOptions options, SchemeKind format,
                                              const std::vector<std::string>& skip = {});

}  // namespace nibble
