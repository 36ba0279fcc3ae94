// The fused MoE's prepared experts and their forward pass (moe_forward.cpp), used by the kernels
// of moe_kernel.cpp.
#pragma once

#include "packed_weight.hpp"
#include "probe.hpp"

#include <nibble/sdk/plugin.hpp>
#include <nibble/sdk/portable_moe.hpp>
#include <nibble/sdk/weights.hpp>

#include <cstdint>
#include <memory>
#include <vector>

namespace nibble::cpu_amx {

/// moe_a16 (activations stay floating point) or moe_a8 (quantized to int8 per token).
enum class MoeMode { a16, a8 };

/// One expert's packed projections.
using PackedExpert = sdk::portable::Expert<std::unique_ptr<PackedLinear>>;

/// w13 ([2I][K], gate rows first) packed with gate and up panels alternating, so that any
/// even-aligned panel range computes whole columns of silu(gate)·up. Needs I % 16 == 0.
std::unique_ptr<PackedLinear> pack_w13_interleaved(const sdk::QuantWeight& w13, int threads);

/// The prepared MoE block: experts packed for `level`'s micro-kernels, K hidden, I intermediate.
std::unique_ptr<sdk::Prepared> make_moe_prepared(MoeMode mode, std::vector<PackedExpert> experts,
                                                 int64_t K, int64_t I, int64_t top_k,
                                                 IsaLevel level, bool interleaved);

}  // namespace nibble::cpu_amx
