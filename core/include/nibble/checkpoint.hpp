// A Hugging Face style checkpoint (config.json + model.safetensors or shards): layer discovery
// (quantized linears, dense linears, MoE blocks) and decoding into canonical weights.
#pragma once

#include <nibble/canonical_weight.hpp>
#include <nibble/checkpoint_scheme.hpp>
#include <nibble/export.hpp>
#include <nibble/quant_config.hpp>
#include <nibble/safetensors.hpp>

#include <nlohmann/json.hpp>

#include <array>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace nibble {

/// Whether a linear layer is quantized or plain.
enum class LayerKind { Quantized, Dense };

/// One linear layer outside the MoE experts (routers and modules_to_not_convert included).
struct LayerInfo {
  std::string prefix;  ///< module name, e.g. "model.layers.0.self_attn.q_proj"
  LayerKind kind = LayerKind::Quantized;
  std::string scheme;      ///< "gptq_v1", "gptq_v2", "awq_gemm" or "dense"
  int64_t K = 0;           ///< in_features
  int64_t N = 0;           ///< out_features
  int bits = 0;            ///< 0 for dense
  int group_size = 0;      ///< as configured (-1: one group); 0 for dense
  bool act_order = false;  ///< g_idx present and not the identity grouping
  bool symmetric = false;  ///< every effective zero point is 2^(bits-1)
  bool has_bias = false;
  uint64_t bytes = 0;  ///< bytes on disk of all its tensors
  std::string dtype;   ///< scales dtype (quantized) or weight dtype (dense), e.g. "F16"
  /// GPTQ v1 only: stored zero nibbles equal to 2^bits - 1 (decoded as 2^bits,
  /// docs/formats.md#gptq-v1-zero-points).
  int64_t stored_max_zeros = 0;
  std::string note;  ///< why its settings differ from the global config, if they do
};

/// Naming convention of a MoE block.
enum class MoeStyle {
  Qwen,    ///< P.experts.{e}.gate_proj/up_proj/down_proj, router P.gate
  Mixtral  ///< P.experts.{e}.w1/w3/w2 (P = ...block_sparse_moe), router P.gate
};

/// One MoE block.
struct MoeInfo {
  std::string prefix;         ///< e.g. "model.layers.0.mlp"
  std::string router_prefix;  ///< e.g. "model.layers.0.mlp.gate" (a dense layer [E][K])
  MoeStyle style = MoeStyle::Qwen;
  int num_experts = 0;
  int64_t hidden = 0;        ///< K, the block's input and output width
  int64_t intermediate = 0;  ///< I, one expert's intermediate width
  std::string scheme;        ///< experts' scheme ("gptq_v1", ..., or "dense")
  int w13_bits = 0, w13_group_size = 0;
  int w2_bits = 0, w2_group_size = 0;
  bool act_order = false;      ///< some expert weight has a non-identity g_idx
  std::string dtype;           ///< expert 0's scales dtype, e.g. "F16" (its gate and up share it)
  bool w13_symmetric = false;  ///< every expert's gate and up zero points are 2^(bits-1)
  bool w2_symmetric = false;   ///< every expert's down zero points are 2^(bits-1)
  /// The largest effective zero point of any expert's w13 (gate, up) and of any w2, when the
  /// stored zeros tell it without decoding (all symmetric: 2^(bits-1); a 4-bit GPTQ v1 zero
  /// stored as 15: 16), else 0 for unknown.
  int w13_max_zero = 0, w2_max_zero = 0;
  int top_k = 0;  ///< config.json num_experts_per_tok; 0 when absent
  /// config.json norm_topk_prob; absent: true for Mixtral style (it renormalises), else false.
  bool norm_topk_prob = false;
  std::string scoring = "softmax";  ///< router scoring function
  uint64_t bytes = 0;               ///< bytes on disk of all expert tensors (router excluded)
};

/// A plain weight [N][K] and optional bias [N], borrowed from the mapped checkpoint.
struct NIBBLE_API DenseTensor {
  std::string prefix;
  int64_t K = 0;
  int64_t N = 0;
  const TensorView* weight = nullptr;
  const TensorView* bias = nullptr;  ///< nullptr: no bias
  /// The SDK view; valid while the Checkpoint lives.
  nibble_dense_weight view() const;
};

/// An opened checkpoint. Shapes and configuration are validated at open; values at decode.
class NIBBLE_API Checkpoint {
 public:
  /// Open a directory (config.json + model.safetensors or model.safetensors.index.json), a
  /// single .safetensors file (config read from its directory) or an index file. Throws
  /// nibble::Error naming the file, tensor and expected versus found on any inconsistency.
  static Checkpoint open(const std::filesystem::path& path);

  /// The checkpoint directory.
  const std::filesystem::path& directory() const { return dir_; }
  /// config.json (an empty object when there is none).
  const nlohmann::json& config() const { return config_; }
  /// The quantization config; nullopt for an unquantized checkpoint.
  const std::optional<QuantConfig>& quant_config() const { return quant_; }
  /// The tensors.
  const TensorStore& tensors() const { return store_; }

  /// Linear layers outside MoE experts, sorted by prefix.
  std::vector<LayerInfo> linear_layers() const;
  /// MoE blocks, sorted by prefix.
  std::vector<MoeInfo> moe_blocks() const;
  /// Findings worth telling the user (relabelled v2 layers, suspect v1 zeros, ...).
  const std::vector<std::string>& warnings() const { return warnings_; }

  /// Decode quantized linear layer `prefix`.
  CanonicalWeight decode_linear(const std::string& prefix) const;
  /// The dense weight of layer `prefix` (a router, a modules_to_not_convert layer, ...).
  DenseTensor dense_weight(const std::string& prefix) const;
  /// Decode expert `e` of MoE block `moe_prefix`: w13 = [2I][K] (gate rows, then up rows; gate
  /// and up must share bits, group size and grouping) and w2 = [K][I].
  std::pair<CanonicalWeight, CanonicalWeight> decode_expert(const std::string& moe_prefix,
                                                            int e) const;

 private:
  struct QuantLayer {
    LayerTensors tensors;
    SchemeKind kind = SchemeKind::GptqV1;
    SchemeParams params;
    LayerShape shape;
    LayerInfo info;
  };
  struct DenseLayer {
    DenseTensor tensor;
    LayerInfo info;
  };
  struct MoeBlock {
    MoeInfo info;
    std::vector<std::array<std::string, 3>> experts;  // per expert: gate/w1, up/w3, down/w2
  };

  void discover();
  void discover_moe(
      std::map<std::string, std::map<int, std::map<std::string, std::string>>>& found);
  QuantLayer make_quant_layer(const std::string& prefix);
  const QuantLayer& quant_layer(const std::string& prefix) const;
  const MoeBlock& moe_block(const std::string& prefix) const;

  std::filesystem::path dir_;
  nlohmann::json config_ = nlohmann::json::object();
  std::optional<QuantConfig> quant_;
  TensorStore store_;
  std::map<std::string, QuantLayer> quantized_;
  std::map<std::string, DenseLayer> dense_;
  std::map<std::string, MoeBlock> moe_;
  std::set<std::string> expert_prefixes_;  // layers that belong to a MoE block
  std::vector<std::string> warnings_;
  // Why the config says "not quantized" -> (layers that have a qweight anyway, first such layer).
  std::map<std::string, std::pair<int, std::string>> quantized_despite_;
};

/// Values that open() does not read but that make results meaningless, one line per tensor: scales
/// of quantized layers and MoE router weights holding NaN or infinity (with the count and the
/// first element). Reads every such tensor once; `nibble inspect` reports them as warnings.
NIBBLE_API std::vector<std::string> find_suspect_values(const Checkpoint& checkpoint);

/// "qwen" or "mixtral".
NIBBLE_API std::string_view moe_style_name(MoeStyle style);

}  // namespace nibble
