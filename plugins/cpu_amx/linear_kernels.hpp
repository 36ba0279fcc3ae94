// The quantized linear kernels cpu_amx offers: linear_a16 (W4A16/W8A16, weight-only, the default)
// and linear_a8 (W4A8/W8A8 with per-token dynamic int8 activations, numerics of
// docs/formats.md#w4a8-numerics).
#pragma once

#include <nibble/sdk/plugin.hpp>

#include <cstdint>
#include <memory>
#include <string>

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

/// Rows up to which the streaming AVX-512 kernels run even where AMX exists (above: tiles).
int64_t streaming_row_limit(bool weight_only);

/// Rows from which W4A16's tile kernel dequantizes B to bf16 once per K block and runs a plain
/// bf16 GEMM instead of the exact per-group epilogue (faster once enough rows share each B tile).
int64_t dequant_row_threshold();

/// Stop the worker pool and join oneTBB's workers (used at prepare), the backend's shutdown; no
/// call may be in flight.
void release_threads();

}  // namespace nibble::cpu_amx
