// The quantized linear kernels cpu_amx offers: linear_a16 (W4A16/W8A16, weight-only, the default)
// and linear_a8 (W4A8/W8A8 with per-token dynamic int8 activations, FORMATS B.6 numerics).
#pragma once

#include <nibble/sdk/plugin.hpp>

#include <memory>
#include <string>

#include <tbb/task_arena.h>

namespace nibble::cpu_amx {

std::unique_ptr<sdk::Kernel> make_linear_a16_kernel();
std::unique_ptr<sdk::Kernel> make_linear_a8_kernel();
std::unique_ptr<sdk::Kernel> make_dense_onednn_kernel();
/// Dense layers up to 64 MiB in fp32 (routers) through oneDNN's fp32 matmul.
std::unique_ptr<sdk::Kernel> make_dense_onednn_f32_kernel();

/// Why a quantized kernel of this numeric mode (weight-only when `weight_only`, else dynamic
/// int8) cannot take the layer's mode, activation dtypes or scale dtype ("" when it can); the
/// linear and MoE kernels share these rules.
std::string quantized_mode_limits(const nibble_layer_desc& d, bool weight_only);

/// The process-wide oneTBB arena of `threads` threads (created on first use).
tbb::task_arena& arena_for(int threads);

/// Release the oneTBB arenas the linear kernels keep and join oneTBB's workers (the backend's
/// shutdown; no call may be in flight).
void release_thread_arenas();

}  // namespace nibble::cpu_amx
