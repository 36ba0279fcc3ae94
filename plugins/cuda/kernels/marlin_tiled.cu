// The large-M Marlin kernel: a tiled tensor-core GEMM that dequantizes inside its main loop. A
// block computes 128 rows × 128 outputs; activations and packed weights stream through a
// 4-stage cp.async pipeline in shared memory (64 input channels per stage), each warp takes 32
// rows × one 64-wide Marlin run, turns its 16-byte fragment of each 16 × 64 slab into exact q − z
// B fragments and issues 16 m16n8k16 MMAs per slab. As in the small-M kernel, each group's
// partial sums are scaled in fp32 (no weight or scale is rounded), and when the tiles alone
// cannot fill the GPU, K is split over a thread-block cluster reduced in distributed shared
// memory. f16 and bf16 activations (f32 ones take the small-M kernel).
#include <cooperative_groups.h>

#include <algorithm>

#include "launch.hpp"
#include "marlin_lane.cuh"
#include "mma.cuh"

namespace nibble::cuda {

namespace cg = cooperative_groups;
using device::LaneScales;
using device::load_zeros;
using device::split;
using device::store_out;

namespace {

constexpr int kThreads = 256;  // 8 warps
constexpr int kBM = 128, kBN = 128, kBK = 64, kStages = 4;
constexpr int kSlabs = kBK / 16;  // slabs per stage
constexpr int kWarpRows = 32;     // rows per warp (two m16 tiles)
constexpr int kMaxCluster = 4;

template <int BITS>
constexpr int kStageBytes = kBM* kBK * 2 + kSlabs*(kBN / 64) * 32 * BITS * 4;

template <class T, int BITS>
__global__ void __launch_bounds__(kThreads, 1) marlin_tiled_kernel(const GemmArgs a, int cluster) {
  extern __shared__ uint4 smem[];
  constexpr int kA = kBM * kBK * 2;  // bytes of one stage's activations
  constexpr int kWordsPerLane = BITS / 4;
  const MarlinDevice& w = a.w;
  const int strip = blockIdx.x / cluster, rank = blockIdx.x % cluster;
  const int64_t n0 = int64_t(strip) * kBN, m0 = int64_t(blockIdx.y) * kBM;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, tq = lane % 4;
  const int wm = warp % 4, wn = warp / 4;  // 4 warps along M, 2 along N
  const int64_t n_run = n0 + wn * 64;
  const bool run_valid = n_run < w.N;  // N % 128 == 64: the last strip's second run is empty
  int64_t kb, ke;
  split(w.K / 16, cluster, rank, kb, ke);
  const int64_t tiles = (ke - kb + kSlabs - 1) / kSlabs;

  const int64_t slab_stride = w.N * BITS / 8;  // uint4 per slab row
  const uint4* qw = reinterpret_cast<const uint4*>(w.qweight);
  const char* x = static_cast<const char*>(a.x);

  // Stage t: A rows m0.. (128 × 64 halves, 16-byte chunks XOR-swizzled by row), then the packed
  // words of its slabs for both runs of the strip (contiguous in the layout). Each thread copies
  // the same chunk column of four rows every stage, so their addresses are set up once.
  constexpr int kAChunks = kBM * 8 / kThreads;  // 4
  const int a_ch = threadIdx.x % 8, a_row = threadIdx.x / 8;
  const char* a_src[kAChunks];
  bool a_ok[kAChunks];
#pragma unroll
  for (int i = 0; i < kAChunks; ++i) {
    const int64_t row = m0 + a_row + 32 * i;
    a_ok[i] = row < a.M;
    a_src[i] = x + (a_ok[i] ? row * a.ldx : 0) * 2 + a_ch * 16;
  }
  const int a_dst = a_row * 128 + ((a_ch ^ (a_row % 8)) * 16);         // + 32 rows · 128 per chunk
  constexpr int kBChunks = kSlabs * (kBN / 64) * 8 * BITS / kThreads;  // 1 (4-bit) or 2
  constexpr int kBPerSlab = (kBN / 64) * 8 * BITS;
  auto load_stage = [&](int64_t t) {
    char* base = reinterpret_cast<char*>(smem) + (t % kStages) * kStageBytes<BITS>;
    const int64_t s0 = kb + t * kSlabs;
    const bool k_ok = s0 * 16 + a_ch * 8 < ke * 16;
#pragma unroll
    for (int i = 0; i < kAChunks; ++i) {
      const bool ok = a_ok[i] && k_ok;
      device::cp_async16(base + a_dst + i * 32 * 128, ok ? a_src[i] + s0 * 32 : a.x, ok ? 16 : 0);
    }
    uint4* b = reinterpret_cast<uint4*>(base + kA);
#pragma unroll
    for (int i = 0; i < kBChunks; ++i) {
      const int c = threadIdx.x + i * kThreads;
      const int j = c / kBPerSlab, within = c % kBPerSlab;
      const int64_t s = s0 + j;
      const bool ok = s < ke && n0 + (within / (8 * BITS)) * 64 < w.N;
      const uint4* src = ok ? qw + s * slab_stride + (n0 / 64) * (8 * BITS) + within : qw;
      device::cp_async16(b + c, src, ok ? 16 : 0);
    }
  };

  float acc[2][8][4], tmp[2][8][4];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int t = 0; t < 8; ++t)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[i][t][c] = tmp[i][t][c] = 0.f;

  int64_t group = kb < ke ? device::slab_group(w, w.slab_groups, kb) : 0;
  LaneScales sc;
  uint32_t zop[8];
  if (run_valid) {
    sc.load(w, w.scales, group, n_run, tq);
    load_zeros<T, BITS>(w, w.zeros, group, n_run, lane, zop);
  }
  auto flush = [&]() {
#pragma unroll
    for (int t = 0; t < 8; ++t) {
      const float2 sc2 = sc.get(t);
      const float se = sc2.x, so = sc2.y;
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        acc[i][t][0] += tmp[i][t][0] * se;
        acc[i][t][1] += tmp[i][t][1] * so;
        acc[i][t][2] += tmp[i][t][2] * se;
        acc[i][t][3] += tmp[i][t][3] * so;
#pragma unroll
        for (int c = 0; c < 4; ++c) tmp[i][t][c] = 0.f;
      }
    }
  };

  int64_t next_change = w.group_slabs ? (group + 1) * w.group_slabs : 0;
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < tiles) load_stage(s);
    device::cp_async_commit();
  }
  // One slab j of a stage: A fragments of the warp's two m16 tiles, its B words, 16 MMAs.
  auto compute = [&](const char* base, int j) {
    const uint4* b = reinterpret_cast<const uint4*>(base + kA);
    uint32_t af[2][4];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int r = wm * kWarpRows + i * 16 + (lane % 16);
      const int ch = j * 2 + lane / 16;
      device::ldmatrix_x4(af[i], base + r * 128 + ((ch ^ (r % 8)) * 16));
    }
    const uint4* mine = b + (j * (kBN / 64) + wn) * 8 * BITS + lane * kWordsPerLane;
    if constexpr (BITS == 4) {
      const uint4 v = mine[0];
      const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        uint32_t b0[2], b1[2];
        device::dequant4<T>(words[q], zop[2 * q], zop[2 * q + 1], b0, b1);
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          device::mma<T>(af[i], b0, tmp[i][2 * q]);
          device::mma<T>(af[i], b1, tmp[i][2 * q + 1]);
        }
      }
    } else {
      const uint4 v0 = mine[0], v1 = mine[1];
      const uint32_t words[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
#pragma unroll
      for (int q = 0; q < 8; ++q) {
        uint32_t bq[2];
        device::dequant8<T>(words[q], zop[q], bq);
#pragma unroll
        for (int i = 0; i < 2; ++i) device::mma<T>(af[i], bq, tmp[i][q]);
      }
    }
  };
  auto change_group = [&](int64_t g) {
    flush();
    group = g;
    next_change += w.group_slabs;
    sc.load(w, w.scales, group, n_run, tq);
    load_zeros<T, BITS>(w, w.zeros, group, n_run, lane, zop);
  };

  for (int64_t t = 0; t < tiles; ++t) {
    device::cp_async_wait<kStages - 2>();
    __syncthreads();  // stage t is in, and every warp is done with stage t - 1
    if (t + kStages - 1 < tiles) load_stage(t + kStages - 1);
    device::cp_async_commit();
    if (!run_valid) continue;
    const char* base = reinterpret_cast<const char*>(smem) + (t % kStages) * kStageBytes<BITS>;
    const int64_t sf = kb + t * kSlabs;
    // A whole stage inside one regular group runs without per-slab checks (a change at its first
    // slab is made first; groups of 2 slabs can change again inside the stage).
    if (w.group_slabs != 0 && sf == next_change) change_group(group + 1);
    const bool whole = sf + kSlabs <= ke && w.group_slabs != 0 && next_change >= sf + kSlabs;
    if (whole) {
#pragma unroll
      for (int j = 0; j < kSlabs; ++j) compute(base, j);
    } else {
#pragma unroll
      for (int j = 0; j < kSlabs; ++j) {
        const int64_t s = sf + j;
        if (s >= ke) break;
        const int64_t g = w.group_slabs ? (s == next_change ? group + 1 : group)
                                        : int64_t(__ldg(w.slab_groups + s));
        if (g != group) change_group(g);
        compute(base, j);
      }
    }
  }
  if (run_valid) flush();
  device::cp_async_wait<0>();
  __syncthreads();

  // The block's 128 × 128 sums in shared memory (row-major, padded), then the cluster's ranks
  // each finish a share of them.
  constexpr int kLd = kBN + 4;
  float* sums = reinterpret_cast<float*>(smem);
  {
    const int g = lane / 4;
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int t = 0; t < 8; ++t) {
        const int r = wm * kWarpRows + i * 16 + g, c = wn * 64 + 8 * t + 2 * tq;
        sums[r * kLd + c] = acc[i][t][0];
        sums[r * kLd + c + 1] = acc[i][t][1];
        sums[(r + 8) * kLd + c] = acc[i][t][2];
        sums[(r + 8) * kLd + c + 1] = acc[i][t][3];
      }
  }
  int64_t first = 0, last = kBM * kBN;
  cg::cluster_group cl = cg::this_cluster();
  if (cluster > 1) {
    cl.sync();
    split(kBM * kBN, cluster, rank, first, last);
  } else {
    __syncthreads();
  }
  for (int64_t e = first + threadIdx.x; e < last; e += kThreads) {
    const int r = int(e / kBN), c = int(e % kBN);
    const int64_t row = m0 + r, n = n0 + c;
    if (row >= a.M || n >= w.N) continue;
    float v = 0.f;
    for (int q = 0; q < cluster; ++q)
      v += (cluster > 1 ? cl.map_shared_rank(sums, q) : sums)[r * kLd + c];
    if (a.bias) v += a.bias[n];
    store_out(a.y, row * a.ldy + n, a.y_dtype, v);
  }
  if (cluster > 1) cl.sync();
}

template <class T, int BITS>
cudaError_t launch_typed(const GemmArgs& a, int cluster, cudaStream_t stream) {
  const size_t smem = std::max<size_t>(size_t(kStages) * kStageBytes<BITS>,
                                       size_t(kBM) * (kBN + 4) * sizeof(float));
  auto kernel = marlin_tiled_kernel<T, BITS>;
  cudaError_t e = device::allow_shared_memory<marlin_tiled_kernel<T, BITS>>(smem);
  if (e != cudaSuccess) return e;
  return device::launch_clustered(
      kernel, dim3(unsigned((a.w.N + kBN - 1) / kBN * cluster), unsigned((a.M + kBM - 1) / kBM)),
      dim3(kThreads), smem, stream, cluster, a, cluster);
}

}  // namespace

// Measured on an H200: a cluster of up to three blocks while the tiles leave SMs idle, none once
// they fill the GPU.
int choose_tiled_cluster(const GemmArgs& a, int sm_count) {
  const int64_t blocks = (a.w.N + kBN - 1) / kBN * ((a.M + kBM - 1) / kBM);
  const int64_t c = std::min<int64_t>(sm_count / std::max<int64_t>(1, blocks), 3);
  return int(std::clamp<int64_t>(std::min<int64_t>(c, a.w.K / 16 / (2 * kSlabs)), 1, kMaxCluster));
}

cudaError_t launch_marlin_tiled(const GemmArgs& a, int cluster, cudaStream_t stream) {
  if (a.items || a.w.columns || a.epilogue != Epilogue::store) return cudaErrorInvalidValue;
  if (a.M == 0) return cudaSuccess;
  if (a.w.K % 16 != 0 || a.w.N % 64 != 0) return cudaErrorInvalidValue;
  if (a.ldx % 8 != 0 || reinterpret_cast<uintptr_t>(a.x) % 16 != 0) return cudaErrorInvalidValue;
  if (a.M > int64_t(65535) * kBM) return cudaErrorInvalidValue;
  if (cluster < 1 || cluster > kMaxCluster) return cudaErrorInvalidValue;
  const bool four = a.w.bits == 4;
  if (a.x_dtype == DType::f16)
    return four ? launch_typed<__half, 4>(a, cluster, stream)
                : launch_typed<__half, 8>(a, cluster, stream);
  if (a.x_dtype == DType::bf16)
    return four ? launch_typed<__nv_bfloat16, 4>(a, cluster, stream)
                : launch_typed<__nv_bfloat16, 8>(a, cluster, stream);
  return cudaErrorInvalidValue;
}

}  // namespace nibble::cuda
