// The large-M path of the Marlin layout: the weight dequantized, a share of its outputs at a time,
// into device scratch by launch_marlin_dequant, each share multiplied by cuBLAS (bf16 or f16
// operands, fp32 accumulation). At large M a GEMM is bound by its tensor-core rate, which cuBLAS
// reaches with Hopper's warpgroup MMA and TMA; dequantizing costs one pass over the weight.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "launch.hpp"

namespace nibble::cuda {

/// The fewest rows for which the linear layers take this path (below, the small-M kernel, whose
/// time grows with every 16 rows while this path's barely moves with M). On an H200: 49 from
/// 4096×4096 up (faster there at 48 and 56 rows, even at 40), 65 below (2048×2048 keeps the
/// small-M kernel faster through 64 rows; docs/cuda.md).
int64_t dequant_gemm_rows(int64_t K, int64_t N);

/// Whether the path can run `a`: f16 or bf16 activations, y of x's dtype, no MoE items, the store
/// epilogue, K and N within cuBLAS's 32-bit sizes and the Marlin shape rules (K % 16, N % 64).
/// (With f16 activations the caller also checks that no dequantized weight overflows f16.)
bool dequant_gemm_takes(const GemmArgs& a);

/// Which kernel linear_marlin runs at large M: none (launch_marlin's streaming or tiled kernel),
/// the warpgroup-MMA kernel (where the device runs it, `wgmma` being its fit, else null, and it
/// takes `a`: up to 512 rows, and up to 1024 where K ≥ 4096 and its 256-row blocks all fit on the
/// device at once), or dequantize-then-cuBLAS. Both large-M paths round the dequantized weight to
/// x's dtype, so f16 activations take them only where every dequantized weight is finite in f16
/// (`f16_fits`).
enum class LargeM { none, wgmma, dequant_gemm };
LargeM choose_large_m(const GemmArgs& a, const WgmmaFit* wgmma, bool f16_fits);

/// How one call is cut: outputs in shares of `chunk_cols` columns (a multiple of 64), each
/// dequantized into `weight_bytes` of scratch; with a bias, each share's rows in blocks of
/// `sum_rows` whose fp32 sums take `sum_bytes` more before they are rounded with the bias added.
struct DequantGemmPlan {
  int64_t chunk_cols = 0;
  int64_t sum_rows = 0;
  size_t weight_bytes = 0, sum_bytes = 0;
  size_t scratch_bytes() const { return weight_bytes + sum_bytes; }
};

/// The plan for `a`: all outputs in one share while their dequantized weight takes at most 256 MiB,
/// else equal shares of whole runs within that (one run where K alone passes it); with a bias, all
/// rows at once while their fp32 sums take at most 256 MiB, else blocks of rows within that.
/// `chunk_cols` > 0 forces the share (rounded up to 64) and `sum_rows` > 0 the row blocks (for
/// benchmarks and tests).
DequantGemmPlan plan_dequant_gemm(const GemmArgs& a, int64_t chunk_cols = 0, int64_t sum_rows = 0);

/// Queue y = x·Wᵀ (+ bias) on `stream` with `handle` (its stream is set here) and `scratch` of at
/// least plan.scratch_bytes() bytes. "" on success, else what failed (a launch, a cuBLAS status);
/// `*out_of_memory` (when given) says whether the failure was an allocation.
std::string run_dequant_gemm(const GemmArgs& a, const DequantGemmPlan& plan, cublasHandle_t handle,
                             void* scratch, cudaStream_t stream, bool* out_of_memory = nullptr);

}  // namespace nibble::cuda
