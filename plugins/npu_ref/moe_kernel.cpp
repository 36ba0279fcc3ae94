// npu_ref's MoE kernel: every expert's w13 and w2 in the Ascend layout, each with its own group
// size, run by the portable MoE driver (fp32 silu(gate) · up, routing weight after w2).
#include <nibble/sdk/parallel_tbb.hpp>
#include <nibble/sdk/portable_kernels.hpp>

#include "ascend_layout.hpp"
#include "kernels.hpp"

namespace nibble::npu_ref {

namespace portable = sdk::portable;

namespace {

/// MoE experts, each projection in the Ascend layout with its own group size.
class MoeKernel : public sdk::Kernel {
 public:
  sdk::KernelInfo info() const override {
    return kernel_info("moe_antiquant", NIBBLE_OP_MOE, NIBBLE_MODE_W4A16);
  }
  std::string why_not(const nibble_layer_desc& d) const override {
    if (d.op != NIBBLE_OP_MOE) return "moe_antiquant computes MoE layers only";
    std::string why = why_not_quantized(d);
    if (!why.empty()) return why;
    return portable::why_not_moe_routing(d);
  }
  std::unique_ptr<sdk::Prepared> prepare(const nibble_layer_desc& d,
                                         const nibble_weight_input& in) const override {
    return portable::prepare_moe<AscendWeight, portable::TbbParallel>(d, in);
  }
};

}  // namespace

std::unique_ptr<sdk::Kernel> make_moe_kernel() { return std::make_unique<MoeKernel>(); }

}  // namespace nibble::npu_ref
