// npu_ref's linear kernels: the quantized antiquant matmul and the dense matmul.
#include <nibble/sdk/parallel_tbb.hpp>
#include <nibble/sdk/portable_gemm.hpp>
#include <nibble/sdk/weights.hpp>

#include "ascend_layout.hpp"
#include "kernels.hpp"

namespace nibble::npu_ref {

namespace portable = sdk::portable;

std::string why_not_quantized(const nibble_layer_desc& d) {
  if (d.numeric_mode != NIBBLE_MODE_WEIGHT_ONLY)
    return "npu_ref models Ascend's weight-only antiquant matmul (activations stay f32/f16/bf16); "
           "numeric mode " +
           std::to_string(d.numeric_mode) + " (e.g. dynamic int8 activations) is not implemented";
  if (d.bits != 4 && d.bits != 8)
    return std::to_string(d.bits) + "-bit weights: the Ascend antiquant path takes int4 or int8";
  if (d.group_size != -1 && d.group_size <= 0)
    return "group size " + std::to_string(d.group_size) + " is neither -1 nor positive";
  if (d.K <= 0 || d.N <= 0)
    return "empty layer (K " + std::to_string(d.K) + ", N " + std::to_string(d.N) + ")";
  if (d.act_dtypes & ~kActDtypes)
    return "activation dtypes other than f32, f16 and bf16 were requested";
  if (!sdk::is_float_dtype(d.weight_dtype))
    return "scales of dtype " + sdk::dtype_name(d.weight_dtype) + " (expected f32, f16 or bf16)";
  return "";
}

sdk::KernelInfo info_of(const char* name, nibble_op op, nibble_numeric_mode mode) {
  sdk::KernelInfo k;
  k.name = name;
  k.op = op;
  k.priority = kPriority;
  k.mode = mode;
  k.bound_f32 = kBoundF32;
  k.bound_f16 = kBoundF16;
  k.bound_bf16 = kBoundBf16;
  return k;
}

namespace {

using AntiquantLinear = portable::LinearPrepared<AscendWeight, portable::TbbParallel>;
using DenseLinear = portable::LinearPrepared<portable::DenseLayout, portable::TbbParallel>;

/// Quantized linear: y = x · ((w + offset) · scale)ᵀ + b.
class LinearKernel : public sdk::Kernel {
 public:
  sdk::KernelInfo info() const override {
    return info_of("linear_antiquant", NIBBLE_OP_LINEAR, NIBBLE_MODE_WEIGHT_ONLY);
  }
  std::string why_not(const nibble_layer_desc& d) const override {
    if (d.op != NIBBLE_OP_LINEAR) return "linear_antiquant computes quantized linear layers only";
    return why_not_quantized(d);
  }
  std::unique_ptr<sdk::Prepared> prepare(const nibble_layer_desc& d,
                                         const nibble_weight_input& in) const override {
    sdk::QuantWeight w(*in.quantized, layer_name(d));
    sdk::require(w.K() == d.K && w.N() == d.N,
                 layer_name(d) + ": weight is [" + std::to_string(w.N()) + "][" +
                     std::to_string(w.K()) + "], the descriptor says [" + std::to_string(d.N) +
                     "][" + std::to_string(d.K) + "]");
    return std::make_unique<AntiquantLinear>(
        AscendWeight::pack(w), portable::bias_as_f32(w.raw().bias, w.raw().bias_dtype, w.N()));
  }
};

/// Dense linear (routers, modules_to_not_convert): a plain matmul with fp32 accumulation.
class DenseKernel : public sdk::Kernel {
 public:
  sdk::KernelInfo info() const override {
    return info_of("dense", NIBBLE_OP_DENSE, NIBBLE_MODE_FLOAT);
  }
  std::string why_not(const nibble_layer_desc& d) const override {
    if (d.op != NIBBLE_OP_DENSE) return "dense computes unquantized linear layers only";
    if (d.numeric_mode == NIBBLE_MODE_DYNAMIC_INT8)
      return "dense keeps activations in floating point; dynamic int8 is not implemented";
    if (d.K <= 0 || d.N <= 0) return "empty layer";
    if (!sdk::is_float_dtype(d.weight_dtype))
      return "weight dtype " + sdk::dtype_name(d.weight_dtype) + " (expected f32, f16 or bf16)";
    if (d.act_dtypes & ~kActDtypes)
      return "activation dtypes other than f32, f16 and bf16 were requested";
    return "";
  }
  std::unique_ptr<sdk::Prepared> prepare(const nibble_layer_desc& d,
                                         const nibble_weight_input& in) const override {
    const nibble_dense_weight& w = *in.dense;
    sdk::require(w.K == d.K && w.N == d.N, layer_name(d) + ": weight is [" + std::to_string(w.N) +
                                               "][" + std::to_string(w.K) +
                                               "], the descriptor says [" + std::to_string(d.N) +
                                               "][" + std::to_string(d.K) + "]");
    return std::make_unique<DenseLinear>(portable::DenseLayout(w),
                                         portable::bias_as_f32(w.bias, w.bias_dtype, w.N));
  }
};

}  // namespace

std::unique_ptr<sdk::Kernel> make_linear_kernel() { return std::make_unique<LinearKernel>(); }
std::unique_ptr<sdk::Kernel> make_dense_kernel() { return std::make_unique<DenseKernel>(); }

}  // namespace nibble::npu_ref
