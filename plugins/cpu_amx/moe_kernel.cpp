// The fused Mixture-of-Experts kernels: what they implement, their bounds, and the packing of
// each expert at prepare (the forward pass is moe_forward.cpp).
#include "moe_kernel.hpp"

#include "kernel_api.hpp"
#include "linear_kernels.hpp"
#include "moe_forward.hpp"
#include "packed_weight.hpp"
#include "probe.hpp"

#include <nibble/sdk/portable_moe.hpp>
#include <nibble/sdk/weights.hpp>

#include <memory>
#include <string>

namespace nibble::cpu_amx {
namespace {

class MoeKernel final : public sdk::Kernel {
 public:
  explicit MoeKernel(MoeMode mode) : mode_(mode) {}

  sdk::KernelInfo info() const override {
    sdk::KernelInfo i;
    i.op = NIBBLE_OP_MOE;
    if (mode_ == MoeMode::a16) {
      // x and h are rounded to bf16 once each (two chained linear_a16 projections); fp32 sums.
      i.name = "moe_a16";
      i.priority = 100;
      i.mode = NIBBLE_MODE_W4A16;
      i.bound_f32 = 1e-2;
      i.bound_f16 = 1e-2;
      i.bound_bf16 = 1e-2;
    } else {
      // x and h quantized to int8 per row (two chained linear_a8 projections). h = silu(gate)·up
      // is heavy-tailed, so its row amax is far above its rms and its int8 step coarser than x's:
      // worst measured 2.2-2.6e-2 (tests/cpu_amx/moe_test.cpp, depending on the random layers),
      // too close to linear_a8's 3e-2 for a chained pair, hence 6e-2.
      i.name = "moe_a8";
      i.priority = 90;
      i.mode = NIBBLE_MODE_W4A8;
      i.bound_f32 = 6e-2;
      i.bound_f16 = 6e-2;
      i.bound_bf16 = 6e-2;
    }
    return i;
  }

  std::string why_not(const nibble_layer_desc& d) const override {
    if (d.op != NIBBLE_OP_MOE) return "only Mixture-of-Experts layers (op MOE)";
    if (std::string why = quantized_mode_limits(d, mode_ == MoeMode::a16); !why.empty()) return why;
    if (d.activation != NIBBLE_ACT_SILU)
      return "activation " + std::to_string(d.activation) + ": only silu(gate) · up is implemented";
    if (d.num_experts < 1) return "no experts";
    if (d.top_k < 1) return "top_k " + std::to_string(d.top_k) + " < 1";
    if (d.has_bias) return "expert biases are not part of the MoE op";
    if (d.N > (int64_t(1) << 29)) return "intermediate size above 2^29 (w13 has 2·I outputs)";
    nibble_layer_desc w13 = d;
    w13.op = NIBBLE_OP_LINEAR;
    w13.N = 2 * d.N;
    if (std::string why = packing_limits(w13); !why.empty()) return "w13: " + why;
    nibble_layer_desc w2 = d;
    w2.op = NIBBLE_OP_LINEAR;
    w2.K = d.N;
    w2.N = d.K;
    w2.group_size = d.w2_group_size;
    if (std::string why = packing_limits(w2); !why.empty()) return "w2: " + why;
    return "";
  }

  std::unique_ptr<sdk::Prepared> prepare(const nibble_layer_desc& d,
                                         const nibble_weight_input& in) const override {
    sdk::require(in.experts != nullptr, "moe: no expert source");
    const IsaDecision isa = decide_isa();
    const int threads = sdk::Host::thread_budget();
    // One expert's canonical form alive at a time: fetch, pack both projections, give back.
    const bool interleave = d.N % kPanel == 0;
    auto experts = sdk::portable::prepare_experts<std::unique_ptr<PackedLinear>>(
        d, *in.experts, [&](const sdk::QuantWeight& w13, const sdk::QuantWeight& w2) {
          return PackedExpert{
              interleave ? pack_w13_interleaved(w13, threads) : pack_linear(w13, threads),
              pack_linear(w2, threads)};
        });
    return make_moe_prepared(mode_, std::move(experts), d.K, d.N, d.top_k, isa.level, interleave);
  }

 private:
  MoeMode mode_;
};

}  // namespace

std::unique_ptr<sdk::Kernel> make_moe_a16_kernel() {
  return std::make_unique<MoeKernel>(MoeMode::a16);
}
std::unique_ptr<sdk::Kernel> make_moe_a8_kernel() {
  return std::make_unique<MoeKernel>(MoeMode::a8);
}

}  // namespace nibble::cpu_amx
