// npu_ref's linear kernels: the quantized antiquant matmul and the portable dense matmul.
#include <nibble/sdk/parallel_tbb.hpp>
#include <nibble/sdk/portable_kernels.hpp>

#include "ascend_layout.hpp"
#include "kernels.hpp"

namespace nibble::npu_ref {

namespace portable = sdk::portable;

std::string why_not_quantized(const nibble_layer_desc& d) {
  if (d.numeric_mode != NIBBLE_MODE_W4A16)
    return "npu_ref models Ascend's w4a16 antiquant matmul (activations stay f32/f16/bf16); "
           "numeric mode " +
           std::to_string(d.numeric_mode) + " (e.g. w4a8's int8 activations) is not implemented";
  if (d.bits != 4 && d.bits != 8)
    return std::to_string(d.bits) + "-bit weights: the Ascend antiquant path takes int4 or int8";
  return portable::why_not_quantized_shape(d);
}

sdk::KernelInfo kernel_info(const char* name, nibble_op op, nibble_numeric_mode mode) {
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

/// Quantized linear: y = x · ((w + offset) · scale)ᵀ + b.
class LinearKernel : public sdk::Kernel {
 public:
  sdk::KernelInfo info() const override {
    return kernel_info("linear_antiquant", NIBBLE_OP_LINEAR, NIBBLE_MODE_W4A16);
  }
  std::string why_not(const nibble_layer_desc& d) const override {
    if (d.op != NIBBLE_OP_LINEAR) return "linear_antiquant computes quantized linear layers only";
    return why_not_quantized(d);
  }
  std::unique_ptr<sdk::Prepared> prepare(const nibble_layer_desc& d,
                                         const nibble_weight_input& in) const override {
    return portable::prepare_linear<AscendWeight, portable::TbbParallel>(d, in);
  }
};

}  // namespace

std::unique_ptr<sdk::Kernel> make_linear_kernel() { return std::make_unique<LinearKernel>(); }
std::unique_ptr<sdk::Kernel> make_dense_kernel() {
  return std::make_unique<portable::DenseKernel<portable::TbbParallel>>(
      kernel_info("dense", NIBBLE_OP_DENSE, NIBBLE_MODE_FLOAT));
}

}  // namespace nibble::npu_ref
