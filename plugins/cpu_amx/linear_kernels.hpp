// The quantized linear kernels cpu_amx offers: linear_a16 (numeric mode w4a16, 4- or 8-bit weights,
// the default) and linear_a8 (w4a8: activations quantized to int8 per token, numerics of
// docs/formats.md#w4a8-numerics). A kernel's suffix is its mode's short name: a16 for w4a16, a8
// for w4a8.
#pragma once

#include <nibble/sdk/plugin.hpp>

#include <cstdint>
#include <memory>
#include <string>

#include "probe.hpp"

namespace nibble::cpu_amx {

std::unique_ptr<sdk::Kernel> make_linear_a16_kernel();
std::unique_ptr<sdk::Kernel> make_linear_a8_kernel();
std::unique_ptr<sdk::Kernel> make_dense_onednn_kernel();
/// Dense layers up to 64 MiB in fp32 (routers) through oneDNN's fp32 matmul.
std::unique_ptr<sdk::Kernel> make_dense_onednn_f32_kernel();

/// Why a quantized kernel of this numeric mode (w4a16 when `a16`, else w4a8) cannot take the
/// layer's mode, activation dtypes or scale dtype ("" when it can); the linear and MoE kernels
/// share these rules.
std::string quantized_mode_limits(const nibble_layer_desc& d, bool a16);

/// Rows up to which the streaming AVX-512 kernels run even where AMX exists (above: tiles): 4,
/// and for W4A16 (`a16`) 1 unless its rows stream in fixed point (`fixed_stream`), then up to
/// 4 of its `fixed_rows` (the caller's fixed_point_row_limit(), 0 where that is off).
int64_t streaming_row_limit(bool a16, int64_t fixed_rows, bool fixed_stream);

/// Rows from which W4A16's tile kernel dequantizes B to bf16 once per K block and runs a plain
/// bf16 GEMM instead of the exact per-group epilogue (faster once enough rows share each B tile).
int64_t dequant_row_threshold();

/// Rows up to which W4A16 takes fixed-point activations on AMX
/// (docs/formats.md#w4a16-fixed-point): in the streaming kernel up to the streaming row limit,
/// on the int8 tiles above it; 0 turns it off.
int64_t fixed_point_row_limit();

/// Whether W4A16 rows within the streaming row limit take fixed-point activations too, in the
/// AVX-512 streaming kernel (NIBBLE_CPU_AMX_FIXED_STREAM=0 turns it off: on AMX the streaming
/// limit is then one row; without AMX every M keeps bf16 activations).
bool fixed_point_streaming();

/// Rows up to which a W4A16 layer on `level` takes fixed-point activations: on AMX
/// fixed_point_row_limit() (streamed or on the int8 tiles); on AVX-512 with VNNI every row count,
/// in the streaming kernel, unless fixed_point_streaming() or fixed_point_row_limit() is off; 0
/// elsewhere.
int64_t fixed_point_rows(IsaLevel level);

/// Rows × padded K of the activations up to which each part of a call on the streaming kernels
/// prepares all the rows itself, in a buffer of its thread, instead of a share of them that every
/// part then waits for; 0 always shares them.
int64_t private_fill_elements();
/// The same for W4A16's bf16 rows on the tile kernels (up to 16 rows; AMX).
int64_t private_tile_fill_elements();

/// Stop the worker pool and join oneTBB's workers (used at prepare), the backend's shutdown; no
/// call may be in flight.
void release_threads();

}  // namespace nibble::cpu_amx
