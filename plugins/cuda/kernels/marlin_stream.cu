// Launch of the small-M Marlin kernel (marlin_stream_kernel.cuh): its form for the call's rows
// (the weight as A in tiles of 8 or 16 rows, or the rows as A), its register budget and weight
// ring, the shared memory its windows of K need, and launches split where the rows exceed the
// grid.
#include "marlin_stream_kernel.cuh"

#include <algorithm>

namespace nibble::cuda {
namespace {

using namespace stream_kernel;

template <class A, int BITS, int kMinBlocks, bool kWeightsA, Batches kBatches, int kTile>
cudaError_t launch_occupancy(const GemmArgs& a, StreamConfig c, cudaStream_t stream) {
  constexpr int P = kPlanes<A>;
  const int64_t slabs = a.w.K / 16;
  const int64_t block_slabs = (slabs + c.cluster - 1) / c.cluster;
  // Only the rows a tile or item can hold are staged (one at M = 1), so a window holds more K.
  const int staged = int(std::clamp<int64_t>(a.items ? a.item_rows : a.M, 1, kTile));
  const int64_t k_bytes = int64_t(P) * staged * 2;  // staged bytes per input channel
  const int ring = c.weight_ring;
  const int64_t ring_bytes = int64_t(ring) * kWarps * kRingBatchBytes;
  const int64_t act_budget =
      ring > 0 ? kRingBlockSmem[kMinBlocks - 1] - kSumBytes - ring_bytes : kSmemBudget;
  const int64_t fit = (act_budget / k_bytes - 8) / 16;
  if (fit < 1) return cudaErrorInvalidValue;  // a ring too deep for the staged rows
  // Windows of equal size: a short last window costs a whole staging for few slabs.
  const int64_t windows = std::max<int64_t>(1, (block_slabs + fit - 1) / fit);  // K = 0: one
  const int window = int((block_slabs + windows - 1) / windows);
  const size_t smem = size_t(kSumBytes) + size_t(k_bytes * (int64_t(window) * 16 + 8) + ring_bytes);
  auto kernel = marlin_stream_kernel<A, BITS, kMinBlocks, kWeightsA, kBatches, kTile>;
  cudaError_t e = device::allow_shared_memory<
      marlin_stream_kernel<A, BITS, kMinBlocks, kWeightsA, kBatches, kTile>>(smem);
  if (e != cudaSuccess) return e;
  const int64_t runs = a.w.N / 64;
  const int64_t strips = (runs + c.runs_per_block - 1) / c.runs_per_block;
  const int64_t items = a.items ? a.max_items : (a.M + kTile - 1) / kTile;
  if (items == 0) return cudaSuccess;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(unsigned(strips * c.cluster), unsigned(items), 1);
  cfg.blockDim = dim3(kThreads, 1, 1);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[2];
  unsigned n = 0;
  if (c.overlap_previous) {
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (c.cluster > 1) {
    attr[n].id = cudaLaunchAttributeClusterDimension;
    attr[n].val.clusterDim.x = unsigned(c.cluster);
    attr[n].val.clusterDim.y = 1;
    attr[n++].val.clusterDim.z = 1;
  }
  cfg.attrs = attr;
  cfg.numAttrs = n;
  return cudaLaunchKernelEx(&cfg, kernel, a, c.runs_per_block, c.cluster, window, staged, ring);
}

// Two register budgets: 128 per thread (two blocks per SM, more loads in flight) or 255 (one
// block, no spills).
template <class A, int BITS, bool kWeightsA, Batches kBatches, int kTile>
cudaError_t launch_budget(const GemmArgs& a, StreamConfig c, cudaStream_t stream) {
  return c.blocks_per_sm == 1
             ? launch_occupancy<A, BITS, 1, kWeightsA, kBatches, kTile>(a, c, stream)
             : launch_occupancy<A, BITS, 2, kWeightsA, kBatches, kTile>(a, c, stream);
}

// 16-row tiles keep both ways of holding weight batches in one instantiation (compiled apart
// they measured slower with the rows as A); decode tiles compile the one they run.
template <class A, int BITS>
cudaError_t launch_typed(const GemmArgs& a, StreamConfig c, cudaStream_t stream) {
  if (c.tile_rows != 8)
    return c.weights_as_a == 1
               ? launch_budget<A, BITS, true, Batches::either, kRows>(a, c, stream)
               : launch_budget<A, BITS, false, Batches::either, kRows>(a, c, stream);
  return c.weight_ring > 0 ? launch_budget<A, BITS, true, Batches::ring, 8>(a, c, stream)
                           : launch_budget<A, BITS, true, Batches::registers, 8>(a, c, stream);
}

}  // namespace

cudaError_t launch_marlin_stream(const GemmArgs& a, StreamConfig c, cudaStream_t stream) {
  constexpr int64_t kMaxItems = 65535;      // gridDim.y
  constexpr int64_t kPart = kMaxItems * 8;  // rows per launch, for tiles of 8 or 16 rows
  if (a.items == nullptr && a.M > kPart) {
    for (int64_t m = 0; m < a.M; m += kPart) {
      GemmArgs part = a;
      part.M = a.M - m < kPart ? a.M - m : kPart;
      part.x = static_cast<const char*>(a.x) + m * a.ldx * int64_t(dtype_size(a.x_dtype));
      part.y = static_cast<char*>(a.y) + m * a.ldy * int64_t(dtype_size(a.y_dtype));
      const cudaError_t e = launch_marlin_stream(part, c, stream);
      if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
  }
  if (a.items && a.max_items > kMaxItems) return cudaErrorInvalidValue;
  if (c.runs_per_block == 0 || c.cluster == 0) {
    int dev = 0, sms = 132;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    const StreamConfig chosen = choose_stream_config(a, sms);
    if (c.runs_per_block == 0) c.runs_per_block = chosen.runs_per_block;
    if (c.cluster == 0) c.cluster = chosen.cluster;
  }
  if (c.tile_rows == 0) c.tile_rows = (a.items ? a.item_rows : a.M) <= 8 ? 8 : kRows;
  if (c.tile_rows != 8 && c.tile_rows != kRows) return cudaErrorInvalidValue;
  if (c.weights_as_a < 0) c.weights_as_a = c.tile_rows == 8 ? 1 : 0;
  if (c.weights_as_a != 1 && (c.weights_as_a != 0 || c.tile_rows == 8))
    return cudaErrorInvalidValue;
  if (a.items && (a.item_rows < 1 || a.item_rows > c.tile_rows)) return cudaErrorInvalidValue;
  if (c.runs_per_block != 1 && c.runs_per_block != 2 && c.runs_per_block != 4 &&
      c.runs_per_block != 8)
    return cudaErrorInvalidValue;
  if (c.cluster < 1 || c.cluster > kMaxCluster) return cudaErrorInvalidValue;
  if (c.weight_ring < 0) c.weight_ring = choose_weight_ring(a, c);
  if (c.weight_ring == 1 || c.weight_ring > kStreamMaxRing) return cudaErrorInvalidValue;
  if (a.w.K % 16 != 0 || a.w.N % 64 != 0) return cudaErrorInvalidValue;
  if (a.w.K / 16 >= (int64_t(1) << 27)) return cudaErrorInvalidValue;  // 32-bit slab indices
  const bool four = a.w.bits == 4;
  if (a.w.bits != 4 && a.w.bits != 8) return cudaErrorInvalidValue;
  switch (a.x_dtype) {
    case DType::f16:
      return four ? launch_typed<__half, 4>(a, c, stream) : launch_typed<__half, 8>(a, c, stream);
    case DType::bf16:
      return four ? launch_typed<__nv_bfloat16, 4>(a, c, stream)
                  : launch_typed<__nv_bfloat16, 8>(a, c, stream);
    case DType::f32:
      return four ? launch_typed<float, 4>(a, c, stream) : launch_typed<float, 8>(a, c, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace nibble::cuda
