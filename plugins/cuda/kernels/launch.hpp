// The CUDA kernels of the cuda backend as host-callable launches: plain structs of device
// pointers in, work queued on a stream out. No SDK type appears here, so the launches are the
// same for the plugin, the GPU tests and the bench.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace nibble::cuda {

/// Element types of activations, outputs and scales.
enum class DType : int32_t { f32 = 0, f16 = 1, bf16 = 2 };

/// Bytes of one element of `t`.
constexpr size_t dtype_size(DType t) { return t == DType::f32 ? 4 : 2; }

/// One quantized weight K × N in the Marlin layout on the device (sdk/layouts/marlin.hpp), or a
/// stack of equally shaped expert weights with `expert_*` elements between consecutive experts.
struct MarlinDevice {
  const uint32_t* qweight = nullptr;     ///< [K/16][N*bits/2]
  const void* scales = nullptr;          ///< [G][N] permuted, in scale_dtype
  DType scale_dtype = DType::f16;        ///< the checkpoint's own scale dtype
  const uint32_t* zeros = nullptr;       ///< [G][N*bits/32] permuted and interleaved; null: 2^(b-1)
  const int32_t* slab_groups = nullptr;  ///< [K/16] the group of each 16-row slab
  const int32_t* columns = nullptr;      ///< [K] act-order: the input channel of row k; or null
  int32_t bits = 4;
  bool single_group = false;  ///< per-channel scales (permuted by scale_perm_single)
  int64_t K = 0, N = 0;
  int64_t expert_qweight = 0, expert_scales = 0, expert_zeros = 0, expert_slabs = 0,
          expert_columns = 0;
};

/// What a GEMM writes: y = x·Wᵀ (+ bias) in y's dtype, or, for an MoE gate/up weight whose
/// outputs are interleaved in runs of 32 gate and 32 up columns, h = silu(gate) · up.
enum class Epilogue : int32_t { store = 0, swiglu = 1 };

/// One GEMM on the Marlin layout: y[M][N] = x[M][K] · Wᵀ, or an MoE expert pass over rows grouped
/// into work items (expert, first row, row count ≤ 16) listed on the device.
struct GemmArgs {
  MarlinDevice w;
  const void* x = nullptr;
  int64_t ldx = 0;
  DType x_dtype = DType::bf16;
  void* y = nullptr;
  int64_t ldy = 0;
  DType y_dtype = DType::bf16;
  Epilogue epilogue = Epilogue::store;
  const float* bias = nullptr;  ///< [N] or null
  int64_t M = 0;
  // MoE: items[i] = {expert, first sorted row, rows, 0}, i < *item_count ≤ max_items.
  const int4* items = nullptr;
  const int32_t* item_count = nullptr;
  int64_t max_items = 0;
  const int32_t* sorted = nullptr;  ///< sorted row r is the (token, slot) pair sorted[r]
  int32_t top_k = 1;
  bool x_by_token = false;  ///< row r reads x row sorted[r] / top_k (else x row r)
  bool y_by_pair = false;   ///< row r writes y row sorted[r] (else y row r)
};

/// How the small-M kernel splits the work: 64-column runs per block and blocks per cluster
/// along K (1..8); 0 picks from the shape and the device.
struct StreamConfig {
  int runs_per_block = 0;
  int cluster = 0;
};

/// The configuration launch_marlin_stream uses for `a` when given zeros, on a device of
/// `sm_count` multiprocessors.
StreamConfig choose_stream_config(const GemmArgs& a, int sm_count);

/// Queue the small-M Marlin kernel (rows in tiles of 16, tensor cores, split K reduced across a
/// thread-block cluster). Activations f16, bf16 or f32 (split into two bf16 terms).
cudaError_t launch_marlin_stream(const GemmArgs& a, StreamConfig config, cudaStream_t stream);

/// One quantized weight in the general layout (any group size or grouping, zero points 0..2^bits
/// with act-order, 4 or 8 bits): words [ceil(K / (32/bits))][N], word (kw, n) holding q(n, k) for
/// k = kw·(32/bits) + j at bits j·bits; fp32 scales [G][N] (exact copies), zero points [G][N] and
/// the group of every input channel [K].
struct GeneralDevice {
  const uint32_t* qweight = nullptr;
  const float* scales = nullptr;
  const uint8_t* zeros = nullptr;
  const int32_t* groups = nullptr;
  int32_t bits = 4;
  int64_t K = 0, N = 0;
};

/// y[M][N] = x[M][K] · Wᵀ (+ bias) on the general layout, in fp32 on the CUDA cores: x f32, f16
/// or bf16, y in x's dtype.
struct GeneralArgs {
  GeneralDevice w;
  const void* x = nullptr;
  int64_t ldx = 0;
  DType x_dtype = DType::bf16;
  void* y = nullptr;
  int64_t ldy = 0;
  const float* bias = nullptr;
  int64_t M = 0;
};

/// Queue the general kernel.
cudaError_t launch_general(const GeneralArgs& a, cudaStream_t stream);

}  // namespace nibble::cuda
