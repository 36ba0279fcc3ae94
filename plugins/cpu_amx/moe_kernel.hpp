// The fused Mixture-of-Experts kernels cpu_amx offers: moe_a16 (numeric mode w4a16, the default)
// and moe_a8 (w4a8: activations quantized to int8 per token). Each expert's w13 and w2 use the
// linear kernels' packed layout and micro-kernels (docs/cpu_amx.md, "MoE").
#pragma once

#include <nibble/sdk/plugin.hpp>

#include <memory>

namespace nibble::cpu_amx {

std::unique_ptr<sdk::Kernel> make_moe_a16_kernel();
std::unique_ptr<sdk::Kernel> make_moe_a8_kernel();

}  // namespace nibble::cpu_amx
