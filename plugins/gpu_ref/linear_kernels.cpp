// gpu_ref's linear kernels: Marlin where its rules hold, ExLlama for every other GPTQ-like or
// AWQ weight, and a dense fp32-accumulating matmul for unquantized layers.
#include <nibble/sdk/parallel_tbb.hpp>
#include <nibble/sdk/portable_kernels.hpp>

#include "exllama_layout.hpp"
#include "kernels.hpp"
#include "marlin_layout.hpp"

namespace nibble::gpu_ref {

namespace portable = sdk::portable;

namespace {

class MarlinLinear : public sdk::Kernel {
 public:
  sdk::KernelInfo info() const override {
    return kernel_info("linear_marlin", NIBBLE_OP_LINEAR, kMarlinPriority, NIBBLE_MODE_W4A16);
  }
  std::string why_not(const nibble_layer_desc& d) const override {
    if (d.op != NIBBLE_OP_LINEAR) return "linear_marlin computes quantized linear layers only";
    std::string why = why_not_quantized(d);
    if (!why.empty()) return why;
    return sdk::marlin::why_not(d.K, d.N, d.group_size, d.has_g_idx != 0, d.symmetric != 0, d.bits,
                                sdk::max_zero(d), portable::layer_name(d));
  }
  std::unique_ptr<sdk::Prepared> prepare(const nibble_layer_desc& d,
                                         const nibble_weight_input& in) const override {
    return portable::prepare_linear<MarlinWeight, portable::TbbParallel>(d, in);
  }
};

class ExllamaLinear : public sdk::Kernel {
 public:
  sdk::KernelInfo info() const override {
    return kernel_info("linear_exllama", NIBBLE_OP_LINEAR, kExllamaPriority, NIBBLE_MODE_W4A16);
  }
  std::string why_not(const nibble_layer_desc& d) const override {
    if (d.op != NIBBLE_OP_LINEAR) return "linear_exllama computes quantized linear layers only";
    return why_not_quantized(d);
  }
  std::unique_ptr<sdk::Prepared> prepare(const nibble_layer_desc& d,
                                         const nibble_weight_input& in) const override {
    return portable::prepare_linear<ExllamaWeight, portable::TbbParallel>(d, in);
  }
};

}  // namespace

std::string why_not_quantized(const nibble_layer_desc& d) {
  if (d.numeric_mode != NIBBLE_MODE_W4A16)
    return "gpu_ref models the CUDA w4a16 kernels (ExLlama, Marlin: activations stay "
           "f32/f16/bf16); numeric mode " +
           std::to_string(d.numeric_mode) + " (e.g. w4a8's int8 activations) is not implemented";
  if (d.bits != 4 && d.bits != 8)
    return std::to_string(d.bits) + "-bit weights: gpu_ref packs 4- or 8-bit values";
  return portable::why_not_quantized_shape(d);
}

sdk::KernelInfo kernel_info(const char* name, nibble_op op, int priority,
                            nibble_numeric_mode mode) {
  sdk::KernelInfo k;
  k.name = name;
  k.op = op;
  k.priority = priority;
  k.mode = mode;
  k.bound_f32 = kBoundF32;
  k.bound_f16 = kBoundF16;
  k.bound_bf16 = kBoundBf16;
  return k;
}

std::unique_ptr<sdk::Kernel> make_marlin_linear() { return std::make_unique<MarlinLinear>(); }
std::unique_ptr<sdk::Kernel> make_exllama_linear() { return std::make_unique<ExllamaLinear>(); }
std::unique_ptr<sdk::Kernel> make_dense() {
  return std::make_unique<portable::DenseKernel<portable::TbbParallel>>(
      kernel_info("dense", NIBBLE_OP_DENSE, kDensePriority, NIBBLE_MODE_FLOAT));
}

}  // namespace nibble::gpu_ref
