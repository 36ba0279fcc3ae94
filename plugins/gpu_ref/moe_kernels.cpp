// gpu_ref's MoE kernels: every expert's w13 and w2 repacked like the linear kernels (Marlin where
// both weights fit its rules, as GPTQMarlinMoEKernel / gptq_marlin_moe_repack do; ExLlama
// otherwise), each weight with its own group size.
#include <nibble/sdk/parallel_tbb.hpp>
#include <nibble/sdk/portable_moe.hpp>

#include "exllama_layout.hpp"
#include "kernels.hpp"
#include "marlin_layout.hpp"

namespace nibble::gpu_ref {

namespace portable = sdk::portable;

namespace {

template <class Layout>
std::unique_ptr<sdk::Prepared> prepare_moe(const nibble_layer_desc& d,
                                           const nibble_weight_input& in) {
  auto experts = portable::prepare_experts<Layout>(
      d, *in.experts, [](const sdk::QuantWeight& w13, const sdk::QuantWeight& w2) {
        return portable::Expert<Layout>{Layout::pack(w13), Layout::pack(w2)};
      });
  return std::make_unique<portable::MoePrepared<Layout, portable::TbbParallel>>(std::move(experts),
                                                                                d.K, d.N, d.top_k);
}

class MarlinMoe : public sdk::Kernel {
 public:
  sdk::KernelInfo info() const override {
    return kernel_info("moe_marlin", NIBBLE_OP_MOE, kMarlinPriority, NIBBLE_MODE_WEIGHT_ONLY);
  }
  std::string why_not(const nibble_layer_desc& d) const override {
    if (d.op != NIBBLE_OP_MOE) return "moe_marlin computes MoE layers only";
    std::string why = why_not_moe(d);
    if (!why.empty()) return why;
    why = marlin_why_not(d.K, 2 * d.N, d.group_size, d.has_g_idx != 0, d.symmetric != 0, d.bits,
                         sdk::max_zero(d), "w13");
    if (!why.empty()) return why;
    return marlin_why_not(d.N, d.K, d.w2_group_size, d.w2_has_g_idx != 0, d.w2_symmetric != 0,
                          d.bits, sdk::max_zero(d, true), "w2");
  }
  std::unique_ptr<sdk::Prepared> prepare(const nibble_layer_desc& d,
                                         const nibble_weight_input& in) const override {
    return prepare_moe<MarlinWeight>(d, in);
  }
};

class ExllamaMoe : public sdk::Kernel {
 public:
  sdk::KernelInfo info() const override {
    return kernel_info("moe_exllama", NIBBLE_OP_MOE, kExllamaPriority, NIBBLE_MODE_WEIGHT_ONLY);
  }
  std::string why_not(const nibble_layer_desc& d) const override {
    if (d.op != NIBBLE_OP_MOE) return "moe_exllama computes MoE layers only";
    return why_not_moe(d);
  }
  std::unique_ptr<sdk::Prepared> prepare(const nibble_layer_desc& d,
                                         const nibble_weight_input& in) const override {
    return prepare_moe<ExllamaWeight>(d, in);
  }
};

}  // namespace

std::string why_not_moe(const nibble_layer_desc& d) {
  std::string why = why_not_quantized(d);
  if (!why.empty()) return why;
  if (d.num_experts < 1) return "no experts";
  if (d.top_k < 1) return "top_k " + std::to_string(d.top_k) + " < 1";
  if (d.activation != NIBBLE_ACT_SILU)
    return "activation " + std::to_string(d.activation) + ": only silu(gate) · up is implemented";
  if (d.w2_group_size != -1 && d.w2_group_size <= 0)
    return "w2 group size " + std::to_string(d.w2_group_size) + " is neither -1 nor positive";
  return "";
}

std::unique_ptr<sdk::Kernel> make_marlin_moe() { return std::make_unique<MarlinMoe>(); }
std::unique_ptr<sdk::Kernel> make_exllama_moe() { return std::make_unique<ExllamaMoe>(); }

}  // namespace nibble::gpu_ref
