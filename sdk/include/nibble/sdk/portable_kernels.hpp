// Kernel pieces the portable reference backends have in common: the checks every w4a16
// quantized kernel on f32/f16/bf16 activations makes, the MoE checks on top of them, preparing a
// linear or MoE layer in any layout with a static pack(), and the dense (unquantized) kernel.
// Additive helpers over portable_gemm.hpp and portable_moe.hpp; a backend keeps its own first
// checks (numeric mode, bits), whose messages name what it models.
#pragma once

#include <nibble/sdk/plugin.hpp>
#include <nibble/sdk/portable_gemm.hpp>
#include <nibble/sdk/portable_moe.hpp>
#include <nibble/sdk/weights.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

namespace nibble::sdk::portable {

/// The activation dtypes the portable kernels compute on.
constexpr uint32_t kFloatActDtypes = NIBBLE_DTYPE_F32 | NIBBLE_DTYPE_F16 | NIBBLE_DTYPE_BF16;

/// The layer's name for messages ("layer" when the descriptor has none).
inline std::string layer_name(const nibble_layer_desc& d) { return d.name ? d.name : "layer"; }

/// Group size, shape, activation dtypes and scale dtype of a quantized layer; "" when they suit
/// the portable kernels.
inline std::string why_not_quantized_shape(const nibble_layer_desc& d) {
  if (d.group_size != -1 && d.group_size <= 0)
    return "group size " + std::to_string(d.group_size) + " is neither -1 nor positive";
  if (d.K <= 0 || d.N <= 0)
    return "empty layer (K " + std::to_string(d.K) + ", N " + std::to_string(d.N) + ")";
  if (d.act_dtypes & ~kFloatActDtypes)
    return "activation dtypes other than f32, f16 and bf16 were requested";
  if (!is_float_dtype(d.weight_dtype))
    return "scales of dtype " + dtype_name(d.weight_dtype) + " (expected f32, f16 or bf16)";
  return "";
}

/// The MoE checks the portable driver needs beyond a linear layer's: experts, top_k, the
/// activation and w2's group size; "" when it can run the layer.
inline std::string why_not_moe_routing(const nibble_layer_desc& d) {
  if (d.num_experts < 1) return "no experts";
  if (d.top_k < 1) return "top_k " + std::to_string(d.top_k) + " < 1";
  if (d.activation != NIBBLE_ACT_SILU)
    return "activation " + std::to_string(d.activation) + ": only silu(gate) · up is implemented";
  if (d.w2_group_size != -1 && d.w2_group_size <= 0)
    return "w2 group size " + std::to_string(d.w2_group_size) + " is neither -1 nor positive";
  return "";
}

/// Throw unless a weight of N rows and K columns matches the descriptor's shape.
inline void require_shape(const nibble_layer_desc& d, int64_t N, int64_t K) {
  require(K == d.K && N == d.N, layer_name(d) + ": weight is [" + std::to_string(N) + "][" +
                                    std::to_string(K) + "], the descriptor says [" +
                                    std::to_string(d.N) + "][" + std::to_string(d.K) + "]");
}

/// A quantized linear layer packed by `Layout::pack(QuantWeight)`, with its bias as f32.
template <class Layout, class Parallel>
std::unique_ptr<Prepared> prepare_linear(const nibble_layer_desc& d,
                                         const nibble_weight_input& in) {
  QuantWeight w(*in.quantized, layer_name(d));
  require_shape(d, w.N(), w.K());
  return std::make_unique<LinearPrepared<Layout, Parallel>>(
      Layout::pack(w), bias_as_f32(w.raw().bias, w.raw().bias_dtype, w.N()));
}

/// A MoE layer whose experts' w13 and w2 are each packed by `Layout::pack(QuantWeight)`.
template <class Layout, class Parallel>
std::unique_ptr<Prepared> prepare_moe(const nibble_layer_desc& d, const nibble_weight_input& in) {
  auto experts =
      prepare_experts<Layout>(d, *in.experts, [](const QuantWeight& w13, const QuantWeight& w2) {
        return Expert<Layout>{Layout::pack(w13), Layout::pack(w2)};
      });
  return std::make_unique<MoePrepared<Layout, Parallel>>(std::move(experts), d.K, d.N, d.top_k);
}

/// The dense kernel: unquantized linear layers (routers, modules_to_not_convert) as a plain
/// matmul with fp32 accumulation. `info` is the backend's (its name, priority and bounds).
template <class Parallel>
class DenseKernel : public Kernel {
 public:
  /// A dense kernel that reports `info`.
  explicit DenseKernel(KernelInfo info) : info_(std::move(info)) {}
  KernelInfo info() const override { return info_; }
  std::string why_not(const nibble_layer_desc& d) const override {
    if (d.op != NIBBLE_OP_DENSE) return info_.name + " computes unquantized linear layers only";
    if (d.numeric_mode == NIBBLE_MODE_W4A8)
      return info_.name + " keeps activations in floating point; w4a8 is not implemented";
    if (d.K <= 0 || d.N <= 0) return "empty layer";
    if (!is_float_dtype(d.weight_dtype))
      return "weight dtype " + dtype_name(d.weight_dtype) + " (expected f32, f16 or bf16)";
    if (d.act_dtypes & ~kFloatActDtypes)
      return "activation dtypes other than f32, f16 and bf16 were requested";
    return "";
  }
  std::unique_ptr<Prepared> prepare(const nibble_layer_desc& d,
                                    const nibble_weight_input& in) const override {
    const nibble_dense_weight& w = *in.dense;
    require_shape(d, w.N, w.K);
    return std::make_unique<LinearPrepared<DenseLayout, Parallel>>(
        DenseLayout(w), bias_as_f32(w.bias, w.bias_dtype, w.N));
  }

 private:
  KernelInfo info_;
};

}  // namespace nibble::sdk::portable
