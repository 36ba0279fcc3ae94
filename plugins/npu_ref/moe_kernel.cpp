// npu_ref's MoE kernel: every expert's w13 and w2 in the Ascend layout, each with its own group
// size, run by the portable MoE driver (fp32 silu(gate) · up, routing weight after w2).
#include <nibble/sdk/parallel_tbb.hpp>
#include <nibble/sdk/portable_moe.hpp>

#include "ascend_layout.hpp"
#include "kernels.hpp"

namespace nibble::npu_ref {

namespace portable = sdk::portable;

namespace {

using AntiquantMoe = portable::MoePrepared<AscendWeight, portable::TbbParallel>;

/// MoE experts, each projection in the Ascend layout with its own group size.
class MoeKernel : public sdk::Kernel {
 public:
  sdk::KernelInfo info() const override {
    return info_of("moe_antiquant", NIBBLE_OP_MOE, NIBBLE_MODE_WEIGHT_ONLY);
  }
  std::string why_not(const nibble_layer_desc& d) const override {
    if (d.op != NIBBLE_OP_MOE) return "moe_antiquant computes MoE layers only";
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
  std::unique_ptr<sdk::Prepared> prepare(const nibble_layer_desc& d,
                                         const nibble_weight_input& in) const override {
    auto experts = portable::prepare_experts<AscendWeight>(
        d, *in.experts, [](const sdk::QuantWeight& w13, const sdk::QuantWeight& w2) {
          return portable::Expert<AscendWeight>{AscendWeight::pack(w13), AscendWeight::pack(w2)};
        });
    return std::make_unique<AntiquantMoe>(std::move(experts), d.K, d.N, d.top_k);
  }
};

}  // namespace

std::unique_ptr<sdk::Kernel> make_moe_kernel() { return std::make_unique<MoeKernel>(); }

}  // namespace nibble::npu_ref
