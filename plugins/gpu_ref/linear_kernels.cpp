// gpu_ref's linear kernels: Marlin where its rules hold, ExLlama for every other GPTQ-like or
// AWQ weight, and a dense fp32-accumulating matmul for unquantized layers.
#include <nibble/sdk/parallel_tbb.hpp>
#include <nibble/sdk/portable_gemm.hpp>
#include <nibble/sdk/weights.hpp>

#include "exllama_layout.hpp"
#include "kernels.hpp"
#include "marlin_layout.hpp"

namespace nibble::gpu_ref {

namespace portable = sdk::portable;

namespace {

constexpr uint32_t kActDtypes = NIBBLE_DTYPE_F32 | NIBBLE_DTYPE_F16 | NIBBLE_DTYPE_BF16;

std::string layer_name(const nibble_layer_desc& d) { return d.name ? d.name : "layer"; }

sdk::QuantWeight checked_weight(const nibble_layer_desc& d, const nibble_weight_input& in) {
  sdk::QuantWeight w(*in.quantized, layer_name(d));
  sdk::require(w.K() == d.K && w.N() == d.N,
               layer_name(d) + ": weight is [" + std::to_string(w.N()) + "][" +
                   std::to_string(w.K()) + "], the descriptor says [" + std::to_string(d.N) + "][" +
                   std::to_string(d.K) + "]");
  return w;
}

template <class Layout>
std::unique_ptr<sdk::Prepared> prepare_linear(const nibble_layer_desc& d,
                                              const nibble_weight_input& in) {
  sdk::QuantWeight w = checked_weight(d, in);
  return std::make_unique<portable::LinearPrepared<Layout, portable::TbbParallel>>(
      Layout::pack(w), portable::bias_as_f32(w.raw().bias, w.raw().bias_dtype, w.N()));
}

class MarlinLinear : public sdk::Kernel {
 public:
  sdk::KernelInfo info() const override {
    return kernel_info("linear_marlin", NIBBLE_OP_LINEAR, kMarlinPriority, NIBBLE_MODE_WEIGHT_ONLY);
  }
  std::string why_not(const nibble_layer_desc& d) const override {
    if (d.op != NIBBLE_OP_LINEAR) return "linear_marlin computes quantized linear layers only";
    std::string why = why_not_quantized(d);
    if (!why.empty()) return why;
    return marlin_why_not(d.K, d.N, d.group_size, d.has_g_idx != 0, d.symmetric != 0, d.bits,
                          sdk::max_zero(d), layer_name(d));
  }
  std::unique_ptr<sdk::Prepared> prepare(const nibble_layer_desc& d,
                                         const nibble_weight_input& in) const override {
    return prepare_linear<MarlinWeight>(d, in);
  }
};

class ExllamaLinear : public sdk::Kernel {
 public:
  sdk::KernelInfo info() const override {
    return kernel_info("linear_exllama", NIBBLE_OP_LINEAR, kExllamaPriority,
                       NIBBLE_MODE_WEIGHT_ONLY);
  }
  std::string why_not(const nibble_layer_desc& d) const override {
    if (d.op != NIBBLE_OP_LINEAR) return "linear_exllama computes quantized linear layers only";
    return why_not_quantized(d);
  }
  std::unique_ptr<sdk::Prepared> prepare(const nibble_layer_desc& d,
                                         const nibble_weight_input& in) const override {
    return prepare_linear<ExllamaWeight>(d, in);
  }
};

class DenseLinear : public sdk::Kernel {
 public:
  sdk::KernelInfo info() const override {
    return kernel_info("dense", NIBBLE_OP_DENSE, kDensePriority, NIBBLE_MODE_FLOAT);
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
    return std::make_unique<portable::LinearPrepared<portable::DenseLayout, portable::TbbParallel>>(
        portable::DenseLayout(w), portable::bias_as_f32(w.bias, w.bias_dtype, w.N));
  }
};

}  // namespace

std::string why_not_quantized(const nibble_layer_desc& d) {
  if (d.numeric_mode != NIBBLE_MODE_WEIGHT_ONLY)
    return "gpu_ref models the CUDA weight-only kernels (ExLlama, Marlin: activations stay "
           "f32/f16/bf16); numeric mode " +
           std::to_string(d.numeric_mode) + " (e.g. dynamic int8 activations) is not implemented";
  if (d.bits != 4 && d.bits != 8)
    return std::to_string(d.bits) + "-bit weights: gpu_ref packs 4- or 8-bit values";
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
std::unique_ptr<sdk::Kernel> make_dense() { return std::make_unique<DenseLinear>(); }

}  // namespace nibble::gpu_ref
