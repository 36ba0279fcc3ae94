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
  /// Slabs per group when groups are regular (no act-order): slab s is in group s / group_slabs,
  /// and slab_groups is not read; 0 when it must be.
  int32_t group_slabs = 0;
  const int32_t* columns = nullptr;  ///< [K] act-order: the input channel of row k; or null
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
/// into work items (expert, first row, row count ≤ item_rows) listed on the device.
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
  /// The most rows of any item: the RouteArgs::item_rows the items were cut with (the kernel
  /// finishes at most tile_rows rows of an item, and the launcher refuses more than that).
  int32_t item_rows = 16;
  const int32_t* sorted = nullptr;  ///< sorted row r is the (token, slot) pair sorted[r]
  int32_t top_k = 1;
  bool x_by_token = false;  ///< row r reads x row sorted[r] / top_k (else x row r)
  bool y_by_pair = false;   ///< row r writes y row sorted[r] (else y row r)
};

/// The small-M kernel's shape: warps per block, the most rows per tile (16; decode tiles take
/// 8), the largest cluster of blocks splitting K and the deepest weight ring.
constexpr int kStreamWarps = 8, kStreamRows = 16, kStreamMaxCluster = 8, kStreamMaxRing = 6;

/// How the small-M kernel splits the work: 64-column runs per block and blocks per cluster
/// along K (1..8); 0 picks from the shape and the device.
struct StreamConfig {
  int runs_per_block = 0;
  int cluster = 0;
  int blocks_per_sm = 2;  ///< the register budget: 2 (128 per thread) or 1 (255)
  /// Rows per tile: 8 or 16; 0 picks 8 where no tile or item holds more rows.
  int tile_rows = 0;
  /// 1: the weight is the MMA's A operand (4 MMAs per slab and 8 rows, the group sums in
  /// registers; always so in 8-row tiles); 0: the rows are A (16-row tiles only, 8 MMAs per slab,
  /// the group sums flushed to shared memory); -1: the weight in 8-row tiles, the rows in
  /// 16-row ones (choose_stream_config picks per layer).
  int weights_as_a = -1;
  /// Launch with programmatic stream serialization: the kernel starts while the previous kernel
  /// on the stream finishes, loads its first weights, then waits for it before it reads the
  /// activations (or the MoE items) and before it writes anything.
  bool overlap_previous = true;
  /// Batches of weight words each warp keeps in flight through a ring in shared memory (2-6,
  /// filled with cp.async), 0 for two buffers in registers; -1 picks.
  int weight_ring = -1;
};

/// The configuration launch_marlin_stream uses for `a` when given zeros, on a device of
/// `sm_count` multiprocessors.
StreamConfig choose_stream_config(const GemmArgs& a, int sm_count);

/// The weight ring launch_marlin_stream uses for `a` split as `config` when asked to pick.
int choose_weight_ring(const GemmArgs& a, const StreamConfig& config);

/// Queue the small-M Marlin kernel (rows in tiles of 8 or 16, tensor cores, split K reduced across
/// a thread-block cluster). Activations f16, bf16 or f32 (split into two bf16 terms).
cudaError_t launch_marlin_stream(const GemmArgs& a, StreamConfig config, cudaStream_t stream);

/// Blocks per cluster (1..4) along K the tiled kernel uses for `a` on `sm_count` multiprocessors.
int choose_tiled_cluster(const GemmArgs& a, int sm_count);

/// Queue the large-M Marlin kernel (128 × 128 tiles, cp.async pipeline, tensor cores): f16/bf16
/// activations with a row stride of a multiple of 8 elements and 16-byte alignment, no act-order
/// gather, no MoE items (cudaErrorInvalidValue otherwise).
cudaError_t launch_marlin_tiled(const GemmArgs& a, int cluster, cudaStream_t stream);

/// Whether launch_marlin_tiled takes `a`.
bool tiled_takes(const GemmArgs& a);

/// Whether the current device runs launch_marlin_wgmma's sm_90a code (compute capability 9.0).
bool wgmma_available();

/// Whether launch_marlin_wgmma takes `a`: 4-bit weights without act-order, groups of 64 or more
/// input channels (or one per channel), K % 64 = 0, f16/bf16 activations with a row stride of a
/// multiple of 8 elements up to 2^22 and 16-byte alignment, y of x's dtype, no MoE items.
bool wgmma_takes(const GemmArgs& a);

/// How the warpgroup-MMA kernel runs: blocks per cluster splitting K (1..4; 0 lets
/// choose_wgmma_config pick everything), and whether a warpgroup keeps two sets of A fragments so
/// that it dequantizes the next stage while this stage's MMAs run (one block per multiprocessor) or
/// one set (two blocks per multiprocessor overlapping each other).
struct WgmmaConfig {
  int cluster = 0;
  bool paired = false;
  /// Activation rows per block: 128, or 256 (two fragment sets only).
  int rows = 128;
  /// With two fragment sets: a copying warpgroup copies each stage with the tensor memory
  /// accelerator and the computing warps wait on the stage's transaction barrier (else every
  /// thread copies with cp.async and the block meets at a barrier every stage). Ignored where the
  /// driver has no tensor maps.
  bool tma = true;
};

/// How many clusters of 1..4 blocks of the one-block-per-SM kernels (two fragment sets, or 256
/// rows) the device runs at once: clusters[c], from the CUDA occupancy calculator.
struct WgmmaFit {
  int clusters[5] = {0, 0, 0, 0, 0};
};

/// The current device's WgmmaFit, queried once per device.
WgmmaFit wgmma_fit();

/// The configuration a cluster of 0 stands for: for each block height (128 rows, and 256 above
/// 128 rows) the largest cluster (up to 4, at least four stages per rank) whose blocks all fit at
/// once, two fragment sets, and of the two heights the one with the smaller estimated time (256
/// rows win on long K); where neither fits one wave, unsplit: 256 rows (two sets) above 128 rows,
/// else 128 rows with one fragment set and two blocks per SM.
WgmmaConfig choose_wgmma_config(const GemmArgs& a, const WgmmaFit& fit);

/// Queue y = x·Wᵀ (+ bias) with the large-M kernel on Hopper's warpgroup MMA: the weight
/// dequantized in registers as (q − z)·s (fp32 scale, rounded once to x's dtype) inside the main
/// loop, fp32 accumulation over all of K; only where wgmma_available() (cudaErrorInvalidValue
/// when wgmma_takes() is false, the cluster is out of range, or config.rows is not 128 or 256 —
/// 256 only paired). A cluster of 0 takes choose_wgmma_config's whole configuration.
cudaError_t launch_marlin_wgmma(const GemmArgs& a, WgmmaConfig config, cudaStream_t stream);

/// Queue W's outputs [n0, n1) (multiples of 64) dequantized as (q − z)·s, the fp32 scale applied
/// and the product rounded once to `out` (f16 or bf16), into dst[n − n0][k] with a row stride of
/// `ld` elements and k the input channel (act-order rows go back to their channels); without
/// act-order dst is 16-byte aligned and ld a multiple of 8.
cudaError_t launch_marlin_dequant(const MarlinDevice& w, int64_t n0, int64_t n1, DType out,
                                  void* dst, int64_t ld, cudaStream_t stream);

/// Queue y = x·Wᵀ on the Marlin layout with the kernel that suits M and the dtypes (the small-M
/// streaming kernel, or the tiled one for large M), on a device of `sm_count` multiprocessors.
cudaError_t launch_marlin(const GemmArgs& a, int sm_count, cudaStream_t stream);

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

/// The routing of one MoE forward on the device: topk_ids [M][top_k] (int32 or int64, row stride
/// ld_ids) → the (token, slot) pairs p = m·top_k + j grouped by expert in `sorted`, and work items
/// {expert, first sorted row, rows ≤ item_rows} for the Marlin kernel. Ids outside [0, E) (−1: no
/// expert) are left out. Needs E ≤ kMaxRoutedExperts.
struct RouteArgs {
  const void* ids = nullptr;
  int64_t ld_ids = 0;
  bool ids_int64 = false;
  int64_t M = 0;
  int32_t top_k = 1;
  int32_t num_experts = 1;
  int32_t* sorted = nullptr;      ///< [M·top_k]
  int4* items = nullptr;          ///< [max_items(M·top_k, E, item_rows)]
  int32_t* item_count = nullptr;  ///< [1]
  int32_t item_rows = 16;         ///< the most rows of one item, 1..16
};

/// The most experts the routing kernel sorts (its counters live in shared memory).
constexpr int32_t kMaxRoutedExperts = 4096;

/// An upper bound on the work items of `pairs` routed pairs over `experts` experts, items of at
/// most `item_rows` rows.
constexpr int64_t max_items(int64_t pairs, int64_t experts, int64_t item_rows = 16) {
  return (pairs < experts ? pairs : experts) + pairs / item_rows;
}

/// Queue the routing.
cudaError_t launch_route(const RouteArgs& a, cudaStream_t stream);

/// y[m][k] = Σ_j topk_weights[m][j] · down[m·top_k + j][k] over the slots with an id in [0, E),
/// summed in fp32 in slot order and rounded once to y's dtype (0 for a token with no expert).
struct CombineArgs {
  const float* down = nullptr;  ///< [M·top_k][K]
  const void* ids = nullptr;
  int64_t ld_ids = 0;
  bool ids_int64 = false;
  const void* weights = nullptr;
  int64_t ld_weights = 0;
  DType weights_dtype = DType::f32;
  void* y = nullptr;
  int64_t ldy = 0;
  DType y_dtype = DType::bf16;
  int64_t M = 0, K = 0;
  int32_t top_k = 1, num_experts = 1;
};

/// Queue the combine.
cudaError_t launch_combine(const CombineArgs& a, cudaStream_t stream);

/// dst[r][c] = float(src[r][c]) for a rows × cols matrix (row strides in elements).
cudaError_t launch_to_f32(const void* src, int64_t ld_src, DType src_dtype, float* dst,
                          int64_t ld_dst, int64_t rows, int64_t cols, cudaStream_t stream);

/// dst[r][c] = round(src[r][c] + bias[c]) in dst's dtype (bias may be null).
cudaError_t launch_finish(const float* src, int64_t ld_src, const float* bias, void* dst,
                          int64_t ld_dst, DType dst_dtype, int64_t rows, int64_t cols,
                          cudaStream_t stream);

}  // namespace nibble::cuda
