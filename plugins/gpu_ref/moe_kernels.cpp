// gpu_ref's MoE kernels: every expert's w13 and w2 repacked like the linear kernels (Marlin where
// both weights fit its rules, as GPTQMarlinMoEKernel / gptq_marlin_moe_repack do; ExLlama
// otherwise), each weight with its own group size.
#include <nibble/sdk/parallel_tbb.hpp>
#include <nibble/sdk/portable_kernels.hpp>

#include "exllama_layout.hpp"
#include "kernels.hpp"
#include "marlin_layout.hpp"

namespace nibble::gpu_ref {

namespace portable = sdk::portable;

namespace {

class MarlinMoe : public sdk::Kernel {
 public:
  sdk::KernelInfo info() const override {
    return kernel_info("moe_marlin", NIBBLE_OP_MOE, kMarlinPriority, NIBBLE_MODE_W4A16);
  }
  std::string why_not(const nibble_layer_desc& d) const override {
    if (d.op != NIBBLE_OP_MOE) return "moe_marlin computes MoE layers only";
    std::string why = why_not_moe(d);
    if (!why.empty()) return why;
    why = sdk::marlin::why_not(d.K, 2 * d.N, d.group_size, d.has_g_idx != 0, d.symmetric != 0,
                               d.bits, sdk::max_zero(d), "w13");
    if (!why.empty()) return why;
    return sdk::marlin::why_not(d.N, d.K, d.w2_group_size, d.w2_has_g_idx != 0, d.w2_symmetric != 0,
                                d.bits, sdk::max_zero(d, true), "w2");
  }
  std::unique_ptr<sdk::Prepared> prepare(const nibble_layer_desc& d,
                                         const nibble_weight_input& in) const override {
    return portable::prepare_moe<MarlinWeight, portable::TbbParallel>(d, in);
  }
};

class ExllamaMoe : public sdk::Kernel {
 public:
  sdk::KernelInfo info() const override {
    return kernel_info("moe_exllama", NIBBLE_OP_MOE, kExllamaPriority, NIBBLE_MODE_W4A16);
  }
  std::string why_not(const nibble_layer_desc& d) const override {
    if (d.op != NIBBLE_OP_MOE) return "moe_exllama computes MoE layers only";
    return why_not_moe(d);
  }
  std::unique_ptr<sdk::Prepared> prepare(const nibble_layer_desc& d,
                                         const nibble_weight_input& in) const override {
    return portable::prepare_moe<ExllamaWeight, portable::TbbParallel>(d, in);
  }
};

}  // namespace

std::string why_not_moe(const nibble_layer_desc& d) {
  std::string why = why_not_quantized(d);
  if (!why.empty()) return why;
  return portable::why_not_moe_routing(d);
}

std::unique_ptr<sdk::Kernel> make_marlin_moe() { return std::make_unique<MarlinMoe>(); }
std::unique_ptr<sdk::Kernel> make_exllama_moe() { return std::make_unique<ExllamaMoe>(); }

}  // namespace nibble::gpu_ref
