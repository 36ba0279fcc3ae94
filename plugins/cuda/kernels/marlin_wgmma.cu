// The large-M Marlin kernel on Hopper (sm_90a): dequantization inside the main loop of a
// warpgroup-MMA GEMM. The weight is the MMA's A operand, held in registers: a warpgroup takes one
// 64-wide Marlin run, and warp w reads word w of each lane's 16-byte slab fragment, which is
// exactly the m16n8k16 A fragment of the run's outputs 16w..16w + 15 (the same identity the
// small-M kernel's weights-as-A tiles use). Each value becomes (q − z)·s with the fp32 scale,
// rounded once to the activations' dtype — the weight a bf16/f16 model holds, and the same
// rounding as the dequantize-then-cuBLAS path (docs/formats.md, scale precision) — so the MMA
// accumulates over all of K with no per-group epilogue. The activations are the B operand: 128
// or 256 rows × 64 input channels per stage, copied with cp.async (or by a copying warpgroup
// with the tensor memory accelerator) into 128-byte-swizzled shared
// memory that the MMA reads through a descriptor; the stage's packed weights, scales and zero
// points ride along. A block is two warpgroups (two runs, 128 outputs) × 128 or 256 rows; K may
// be split over a cluster of blocks whose fp32 sums meet in distributed shared memory, which is
// what makes small M fast (docs/cuda.md, "Large M on the warpgroup MMA"). A warpgroup issues a
// stage's four MMAs under one fence.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cooperative_groups.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <type_traits>

#include "launch.hpp"
#include "marlin_lane.cuh"
#include "mma.cuh"
#include "tensor_maps.hpp"
#include "tma.cuh"
#include "wgmma.cuh"

namespace nibble::cuda {

namespace cg = cooperative_groups;

namespace {

constexpr int kRuns = 2;  // 64-wide runs per block, one per warpgroup
constexpr int kThreads = 128 * kRuns;
// The TMA form adds a copying warpgroup: one lane issues the copies, and the group gives its
// registers to the computing ones (setmaxnreg), so 12 warps fit a multiprocessor's registers with
// 232 per computing thread.
constexpr int kTmaThreads = kThreads + 128;
constexpr int kCopyRegs = 40, kMmaRegs = 232;
constexpr int kStageK = 64;  // input channels per stage: one 128-byte row of 16-bit values
constexpr int kSlabs = kStageK / 16;
constexpr int kStages = 5;
constexpr int kWBytes = kRuns * kSlabs * 512;  // 4-bit: 32 lanes × 16 bytes per run and slab
constexpr int kScaleBytes = kRuns * 64 * 4;    // the stage's group of scales, up to fp32
constexpr int kZeroBytes = kRuns * 8 * 4;      // and of 4-bit zero points (8 words per run)
static_assert(kScaleBytes + kZeroBytes <= 1024, "a stage's scales and zero points");
constexpr int kSumLd = kRuns * 64 + 4;  // a row of the block's fp32 sums, padded
constexpr int kMaxCluster = 4;

// A block's activation rows, the MMA's N: 128, or 256 (twice the MMA work per dequantized
// weight, 128 accumulators per thread, so with two fragment sets only, one block per SM).
template <int ROWS>
struct Tile {
  static constexpr int kXBytes = ROWS * kStageK * 2;            // a multiple of the 1024-byte atom
  static constexpr int kStageBytes = kXBytes + kWBytes + 1024;  // + scales, zero points
  // + slack to align the atoms, + the copy pipeline's barriers
  static constexpr int kSmemBytes = kStages * kStageBytes + 1024 + 2 * kStages * 8;
  static_assert(kStageBytes % 1024 == 0, "every stage's activations must start on an atom");
  static_assert(ROWS * kSumLd * 4 <= kStages * kStageBytes, "the sums reuse the pipeline");
};

// The fp32 scale at index i of a run's 64 scales of the group in shared memory, stored as S.
template <DType S>
__device__ __forceinline__ float run_scale(const uint8_t* run, int i) {
  if constexpr (S == DType::f32) {
    return reinterpret_cast<const float*>(run)[i];
  } else {
    const uint16_t v = reinterpret_cast<const uint16_t*>(run)[i];
    return S == DType::bf16 ? device::Bits16<__nv_bfloat16>::to_float(v)
                            : device::Bits16<__half>::to_float(v);
  }
}

// Index of output channel `tile`·8 + g among a run's 64 scales (Marlin's permuted layouts; see
// ChannelScales).
__device__ __forceinline__ int scale_index(bool single_group, int g, int tile) {
  return single_group ? (tile >= 4 ? 32 : 0) + 8 * (g / 2) + 2 * (tile & 3) + (g & 1)
                      : 8 * g + tile;
}

// (q − z)·s for one register of exact q − z pairs, rounded once. A bf16 pair widens to fp32 by
// moving each half into the high bits (what to_float2 does, in two integer operations).
template <class T>
__device__ __forceinline__ uint32_t scaled(uint32_t exact, float s) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return device::Bits16<T>::pair(__uint_as_float(exact << 16) * s,
                                   __uint_as_float(exact & 0xffff0000u) * s);
  } else {
    const float2 v = device::Bits16<T>::to_float2(exact);
    return device::Bits16<T>::pair(v.x * s, v.y * s);
  }
}

// One block: outputs n0..n0 + 127 (two runs, one per warpgroup) × rows m0..m0 + ROWS - 1 over
// the stages [first, last) of its cluster rank; S is the scales' dtype. PAIRED keeps two sets of A
// fragments so that a warpgroup dequantizes the next stage while the MMAs of this one run (more
// registers: one block per multiprocessor); otherwise one set, waited for at the end of each stage,
// and two blocks per multiprocessor overlap each other. TMA: a copying warpgroup (one lane) copies
// each stage (x and the weights as one tensor-map box each, x already swizzled; scales and zero
// points as bulk copies) and the stage's barrier counts its bytes, so no other thread issues a copy
// and the warps meet at no block barrier inside the loop: a warp waits only for its stage's bytes,
// and a buffer is refilled once every warp has said its MMAs are done with it. Otherwise every
// thread issues cp.async copies and the block meets at a barrier once per stage.
template <class T, bool PAIRED, DType S, int ROWS, bool TMA>
__device__ __forceinline__ void wgmma_block(const GemmArgs& a, int cluster,
                                            const CUtensorMap* x_map, const CUtensorMap* w_map) {
#if NIBBLE_WGMMA
  constexpr int kRows = ROWS, kXBytes = Tile<ROWS>::kXBytes;
  constexpr int kStageBytes = Tile<ROWS>::kStageBytes;
  extern __shared__ __align__(16) uint8_t smem_raw[];
  // Aligned by an offset from the shared array itself, so that its loads stay shared-memory
  // loads (through an integer cast the compiler emitted generic ones).
  const uint32_t raw_at = uint32_t(__cvta_generic_to_shared(smem_raw));
  uint8_t* smem = smem_raw + ((1024u - (raw_at & 1023u)) & 1023u);
  const MarlinDevice& w = a.w;
  const int tid = threadIdx.x, wg = tid / 128, warp = (tid / 32) % 4, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;
  const int rank = int(blockIdx.x) % cluster;
  const int64_t n0 = int64_t(blockIdx.x / cluster) * (64 * kRuns), m0 = int64_t(blockIdx.y) * kRows;
  const int stages = int(w.K / kStageK);
  const int first = int(int64_t(stages) * rank / cluster);
  const int count = int(int64_t(stages) * (rank + 1) / cluster) - first;
  const int64_t slab_stride = w.N / 2;  // uint4 per slab row (4-bit: N · 4 / 8 / 16 · 16)
  const uint4* qw = reinterpret_cast<const uint4*>(w.qweight);

  // Copies: activations, 8 16-byte chunks per row and stage (ROWS / 32 per thread, same column
  // every stage); weights, 256 chunks per stage (one per thread: run tid / 128, slab
  // (tid / 32) % 4, lane).
  constexpr int kXCopies = kRows / 32;
  const int x_col = tid % 8, x_row = tid / 8;
  // Rows past M copy the block's rows again, cyclically (their sums are never stored): no
  // predicate per copy, and no single row read by every thread of the missing ones (copying row
  // M - 1 for all of them made a block of 64 rows 10-40 % slower). Offsets from the block's first
  // row fit 32 bits (wgmma_takes bounds the row stride).
  const char* x_block = static_cast<const char*>(a.x) + m0 * a.ldx * 2 + x_col * 16;
  const int64_t rows_here = a.M - m0;
  uint32_t x_offset[kXCopies];
#pragma unroll
  for (int c = 0; c < kXCopies; ++c) {
    const int64_t r = x_row + 32 * c;
    x_offset[c] = uint32_t((r < rows_here ? r : r % rows_here) * a.ldx * 2);
  }
  const int x_dst = x_row * 128 + ((x_col ^ (x_row % 8)) * 16);  // + 32 rows · 128 bytes per i
  const int w_run = tid / 128, w_slab = (tid / 32) % 4;
  const bool w_ok = n0 + 64 * w_run < w.N;
  const uint4* w_src = qw + (w_ok ? (n0 / 64 + w_run) * 32 : 0) + w_slab * slab_stride + lane;
  // The group of the next stage to load, and how many stages of it are left: the copies run in
  // stage order, so one division here and none per stage.
  const int group_stages = w.group_slabs / kSlabs;
  int load_group = first / group_stages, load_left = group_stages - first % group_stages;
  constexpr int s_size = S == DType::f32 ? 4 : 2;
  constexpr int s_per_chunk = 16 / s_size, s_chunks = kRuns * 64 / s_per_chunk;
  // Local stage i (global stage first + i) lives in buffer i % kStages.
  auto load_stage = [&](int i) {
    uint8_t* base = smem + (i % kStages) * kStageBytes;
    const int st = first + i;
#pragma unroll
    for (int c = 0; c < kXCopies; ++c)
      device::cp_async16(base + x_dst + c * 32 * 128, x_block + st * kStageK * 2 + x_offset[c]);
    device::cp_async16(base + kXBytes + tid * 16, w_src + int64_t(st) * kSlabs * slab_stride,
                       w_ok ? 16 : 0);
    // The group's scales of the block's outputs (contiguous: the permutation stays within a run)
    // and zero-point words, with the stage, so no global load waits inside the loop; beyond N
    // they are zero-filled.
    const int64_t grp = load_group;
    if (--load_left == 0) ++load_group, load_left = group_stages;
    if (tid < s_chunks) {
      const int64_t e = grp * w.N + n0 + tid * s_per_chunk;
      const bool ok = n0 + tid * s_per_chunk < w.N;
      device::cp_async16(base + kXBytes + kWBytes + tid * 16,
                         static_cast<const char*>(w.scales) + (ok ? e : 0) * s_size, ok ? 16 : 0);
    } else if (w.zeros != nullptr && tid >= 32 && tid < 32 + kZeroBytes / 16) {
      const int c = tid - 32;  // 4 words each: runs c / 2
      const bool ok = n0 + 32 * c < w.N;
      device::cp_async16(base + kXBytes + kWBytes + kScaleBytes + c * 16,
                         w.zeros + (ok ? grp * (w.N / 8) + n0 / 8 + 4 * c : 0), ok ? 16 : 0);
    }
  };
  // TMA: full[b] completes when buffer b's copies have landed, empty[b] when all 8 warps are done
  // with the stage it held. A run past N is not copied: its warpgroup's sums are never stored.
  uint64_t* const full = reinterpret_cast<uint64_t*>(smem + kStages * kStageBytes);
  uint64_t* const empty = full + kStages;
  const int valid_runs = n0 + 64 < w.N ? 2 : 1;
  const uint32_t stage_tx = uint32_t(kXBytes + kWBytes + valid_runs * 64 * s_size +
                                     (w.zeros != nullptr ? valid_runs * 32 : 0));
  auto produce = [&](int i) {
    const int b = i % kStages;
    uint8_t* base = smem + b * kStageBytes;
    if (i >= kStages) device::mbarrier_wait(&empty[b], uint32_t((i / kStages - 1) & 1));
    const int st = first + i;
    const int64_t grp = load_group;
    if (--load_left == 0) ++load_group, load_left = group_stages;
    device::mbarrier_arrive_expect_tx(&full[b], stage_tx);
    device::tensor_copy_2d(base, x_map, st * kStageK, int(m0), &full[b]);
    // The stage's 4 slab rows × both runs' 512 bytes (a run past N reads zeros).
    device::tensor_copy_2d(base + kXBytes, w_map, int(n0 / 64) * 128, st * kSlabs, &full[b]);
    device::bulk_copy(base + kXBytes + kWBytes,
                      static_cast<const char*>(w.scales) + (grp * w.N + n0) * s_size,
                      uint32_t(valid_runs * 64 * s_size), &full[b]);
    if (w.zeros != nullptr)
      device::bulk_copy(base + kXBytes + kWBytes + kScaleBytes, w.zeros + grp * (w.N / 8) + n0 / 8,
                        uint32_t(valid_runs * 32), &full[b]);
  };

  // This lane's A rows are outputs 16·warp + g and + 8 of its run: n8 tiles 2·warp and 2·warp + 1.
  // A run past N reads zero scales (its copies were zero-filled); without zero points the words
  // read are not used.
  const int s_index0 = scale_index(w.single_group, g, 2 * warp);
  const int s_index1 = scale_index(w.single_group, g, 2 * warp + 1);
  const int z_shift0 = 4 * device::zero_slot4(2 * warp),
            z_shift1 = 4 * device::zero_slot4(2 * warp + 1);
  const bool has_zeros = w.zeros != nullptr;
  struct Channel {
    float s0, s1;
    uint32_t z0, z1;
  };
  auto load_channel = [&](const uint8_t* base) {
    Channel c;
    const uint8_t* run = base + kXBytes + kWBytes + wg * 64 * s_size;
    c.s0 = run_scale<S>(run, s_index0);
    c.s1 = run_scale<S>(run, s_index1);
    const uint32_t word =
        reinterpret_cast<const uint32_t*>(base + kXBytes + kWBytes + kScaleBytes)[wg * 8 + g];
    c.z0 = device::zero_operand<T, 4>(has_zeros ? int((word >> z_shift0) & 15) : 8);
    c.z1 = device::zero_operand<T, 4>(has_zeros ? int((word >> z_shift1) & 15) : 8);
    return c;
  };
  // The stage's four A fragments: slab i's word `warp` of this lane, (q − z)·s rounded once.
  auto dequant_stage = [&](const uint8_t* base, const Channel& c, uint32_t(&frag)[kSlabs][4]) {
    // cp.async: [run][slab][lane][4 words]; TMA: [slab][run][lane][4 words] (one box of the
    // weight's rows of slabs).
    constexpr int kSlabWords = TMA ? kRuns * 128 : 128;
    const uint32_t* words =
        reinterpret_cast<const uint32_t*>(base + kXBytes + wg * (TMA ? 512 : kSlabs * 512));
#pragma unroll
    for (int i = 0; i < kSlabs; ++i) {
      uint32_t b0[2], b1[2];
      device::dequant4<T>(words[i * kSlabWords + lane * 4 + warp], c.z0, c.z1, b0, b1);
      // A rows g (tile 2·warp, scale s0) and g + 8 (tile 2·warp + 1, scale s1).
      frag[i][0] = scaled<T>(b0[0], c.s0);
      frag[i][1] = scaled<T>(b1[0], c.s1);
      frag[i][2] = scaled<T>(b0[1], c.s0);
      frag[i][3] = scaled<T>(b1[1], c.s1);
    }
  };
  auto issue_stage = [&](const uint8_t* base, const uint32_t(&frag)[kSlabs][4],
                         float(&acc)[kRows / 2]) {
    device::wgmma_fence();
#pragma unroll
    for (int i = 0; i < kSlabs; ++i)
      device::wgmma_rs<T, kRows>(acc, frag[i], device::swizzled_kmajor_desc(base + 32 * i));
    device::wgmma_commit();
  };

  float acc[kRows / 2];
#pragma unroll
  for (int i = 0; i < kRows / 2; ++i) acc[i] = 0.f;

  // PAIRED: MMAs of stage i - 1 may run during stage i, so a buffer is refilled two stages after
  // its MMAs were issued (lookahead kStages - 2); otherwise one stage after (kStages - 1).
  constexpr int kAhead = PAIRED ? kStages - 2 : kStages - 1;
  if constexpr (TMA) {
    if (tid == 0) {
      for (int b = 0; b < kStages; ++b) {
        device::mbarrier_init(&full[b], 1);
        device::mbarrier_init(&empty[b], kThreads / 32);
      }
      device::fence_mbarrier_init();
    }
    __syncthreads();
  } else {
#pragma unroll
    for (int i = 0; i < kAhead; ++i) {
      if (i < count) load_stage(i);
      device::cp_async_commit();
    }
  }
  uint32_t frag[PAIRED ? 2 : 1][kSlabs][4];
  auto run_stage = [&](int i, uint32_t(&f)[kSlabs][4]) {
    if constexpr (TMA) {
      device::mbarrier_wait(&full[i % kStages], uint32_t((i / kStages) & 1));
    } else {
      device::cp_async_wait<kAhead - 1>();
      device::fence_proxy_async_shared();  // the copies are generic writes; the MMAs read async
      __syncthreads();  // stage i is in; no warp still reads the buffer refilled next
      if (i + kAhead < count) load_stage(i + kAhead);
      device::cp_async_commit();
    }
    const uint8_t* base = smem + (i % kStages) * kStageBytes;
    dequant_stage(base, load_channel(base), f);
    issue_stage(base, f, acc);
    if constexpr (PAIRED) {
      device::wgmma_wait<1>();  // stage i - 1's MMAs are done: its fragments and buffer are free
      if (TMA && lane == 0 && i > 0) device::mbarrier_arrive(&empty[(i - 1) % kStages]);
    } else {
      device::wgmma_wait<0>();
      if (TMA && lane == 0) device::mbarrier_arrive(&empty[i % kStages]);
    }
  };
  cg::cluster_group cl = cg::this_cluster();
  if constexpr (TMA) {
    if (tid >= kThreads) {
      // The copying warpgroup: one lane fills the buffers in stage order, each once its last
      // stage's MMAs are done; then the group meets the block's barriers below and leaves.
      device::setmaxnreg_dec<kCopyRegs>();
      if (tid == kThreads)
        for (int i = 0; i < count; ++i) produce(i);
      __syncthreads();  // the sums' barrier
      if (cluster > 1) {
        cl.sync();
        cl.sync();
      } else {
        __syncthreads();
      }
      return;
    }
    device::setmaxnreg_inc<kMmaRegs>();
  }
  if constexpr (PAIRED) {
    int i = 0;
    for (; i + 1 < count; i += 2) {
      run_stage(i, frag[0]);
      run_stage(i + 1, frag[1]);
    }
    if (i < count) run_stage(i, frag[0]);
  } else {
    for (int i = 0; i < count; ++i) run_stage(i, frag[0]);
  }
  device::wgmma_wait<0>();
#pragma unroll
  for (int i = 0; i < kRows / 2; ++i) device::fence_register(acc[i]);
  if constexpr (!TMA) device::cp_async_wait<0>();  // TMA: every copy was waited for
  __syncthreads();  // the pipeline's shared memory becomes the block's fp32 sums

  // acc[4j + e]: output 16·warp + g (+ 8 for e ≥ 2) of the run, row 8j + 2t (+ 1 for odd e).
  float* sums = reinterpret_cast<float*>(smem);
  const int o = 64 * wg + 16 * warp + g;
#pragma unroll
  for (int j = 0; j < kRows / 8; ++j) {
    const int r = 8 * j + 2 * t;
    sums[r * kSumLd + o] = acc[4 * j];
    sums[(r + 1) * kSumLd + o] = acc[4 * j + 1];
    sums[r * kSumLd + o + 8] = acc[4 * j + 2];
    sums[(r + 1) * kSumLd + o + 8] = acc[4 * j + 3];
  }
  if (cluster > 1) {
    cl.sync();
  } else {
    __syncthreads();
  }
  // Each rank finishes a share of the rows: 8 outputs per thread and row, summed over the ranks,
  // the bias added in fp32, rounded once, stored as one 16-byte piece where y allows.
  const int64_t cols = w.N - n0 < 64 * kRuns ? w.N - n0 : 64 * kRuns;
  const bool vector = a.ldy % 8 == 0 && reinterpret_cast<uintptr_t>(a.y) % 16 == 0;
  uint16_t* y = static_cast<uint16_t*>(a.y);
  const int chunk = tid % 16;
  const int r_first = kRows * rank / cluster, r_last = kRows * (rank + 1) / cluster;
  for (int r = r_first + tid / 16; r < r_last; r += kThreads / 16) {
    if (m0 + r >= a.M || chunk * 8 >= cols) continue;
    float v[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) v[e] = 0.f;
    for (int q = 0; q < cluster; ++q) {
      const float* src =
          (cluster > 1 ? cl.map_shared_rank(sums, q) : sums) + r * kSumLd + chunk * 8;
      const float4 lo = *reinterpret_cast<const float4*>(src);
      const float4 hi = *reinterpret_cast<const float4*>(src + 4);
      v[0] += lo.x, v[1] += lo.y, v[2] += lo.z, v[3] += lo.w;
      v[4] += hi.x, v[5] += hi.y, v[6] += hi.z, v[7] += hi.w;
    }
    uint16_t out[8];
#pragma unroll
    for (int e = 0; e < 8; ++e)
      out[e] =
          device::Bits16<T>::from_float(a.bias ? v[e] + __ldg(a.bias + n0 + chunk * 8 + e) : v[e]);
    uint16_t* dst = y + (m0 + r) * a.ldy + n0 + chunk * 8;
    if (vector) {
      *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(out);
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) dst[e] = out[e];
    }
  }
  if (cluster > 1) cl.sync();  // the other ranks' sums stay until every rank has read them
#else
  __trap();
#endif
}

template <class T, bool PAIRED, DType S, int ROWS>
__global__ void __launch_bounds__(kThreads, PAIRED || ROWS > 128 ? 1 : 2)
    marlin_wgmma_kernel(const GemmArgs a, int cluster) {
  wgmma_block<T, PAIRED, S, ROWS, false>(a, cluster, nullptr, nullptr);
}

// The TMA form: 8 computing warps and a copying warpgroup. The launch bound compiles for 168
// registers a thread; setmaxnreg then moves them to the computing warps (kMmaRegs). A ninth warp
// alone does not fit: a multiprocessor's four register quarters would hold three warps in one of
// them, at most 170 registers each.
template <class T, DType S, int ROWS>
__global__ void __launch_bounds__(kTmaThreads, 1)
    marlin_wgmma_tma_kernel(const GemmArgs a, int cluster,
                            const __grid_constant__ CUtensorMap x_map,
                            const __grid_constant__ CUtensorMap w_map) {
  wgmma_block<T, true, S, ROWS, true>(a, cluster, &x_map, &w_map);
}

template <class T, bool PAIRED, DType S, int ROWS, bool TMA>
cudaError_t launch_scaled(const GemmArgs& a, int cluster, cudaStream_t stream) {
  constexpr int kRows = ROWS, kSmemBytes = Tile<ROWS>::kSmemBytes;
  const int64_t col_blocks = (a.w.N + 64 * kRuns - 1) / (64 * kRuns);
  const int64_t row_blocks = (a.M + kRows - 1) / kRows;
  if (col_blocks * cluster > int64_t(INT32_MAX) || row_blocks > 65535) return cudaErrorInvalidValue;
  const dim3 grid(unsigned(col_blocks * cluster), unsigned(row_blocks));
  if constexpr (TMA) {
    auto kernel = marlin_wgmma_tma_kernel<T, S, ROWS>;
    if (cudaError_t e =
            device::allow_shared_memory<marlin_wgmma_tma_kernel<T, S, ROWS>>(kSmemBytes);
        e != cudaSuccess)
      return e;
    // wgmma_takes admits only what the maps can describe; should the driver still refuse one,
    // the cp.async form runs the call.
    CUtensorMap x_map{}, w_map{};
    if (!encode_x_map(a, kStageK, kRows, &x_map) || !encode_w_map(a, kRuns, kSlabs, &w_map))
      return launch_scaled<T, PAIRED, S, ROWS, false>(a, cluster, stream);
    return device::launch_clustered(kernel, grid, dim3(kTmaThreads), kSmemBytes, stream, cluster, a,
                                    cluster, x_map, w_map);
  } else {
    auto kernel = marlin_wgmma_kernel<T, PAIRED, S, ROWS>;
    if (cudaError_t e =
            device::allow_shared_memory<marlin_wgmma_kernel<T, PAIRED, S, ROWS>>(kSmemBytes);
        e != cudaSuccess)
      return e;
    return device::launch_clustered(kernel, grid, dim3(kThreads), kSmemBytes, stream, cluster, a,
                                    cluster);
  }
}

template <class T, bool PAIRED, int ROWS, bool TMA>
cudaError_t launch_rows(const GemmArgs& a, int cluster, cudaStream_t stream) {
  switch (a.w.scale_dtype) {
    case DType::f32:
      return launch_scaled<T, PAIRED, DType::f32, ROWS, TMA>(a, cluster, stream);
    case DType::bf16:
      return launch_scaled<T, PAIRED, DType::bf16, ROWS, TMA>(a, cluster, stream);
    default:
      return launch_scaled<T, PAIRED, DType::f16, ROWS, TMA>(a, cluster, stream);
  }
}

// TMA variants only for the one-block-per-SM kernels (two fragment sets).
template <class T>
cudaError_t launch_typed(const GemmArgs& a, const WgmmaConfig& c, cudaStream_t stream) {
  const bool tma = c.tma && tensor_maps_available();
  if (c.rows == 256)
    return tma ? launch_rows<T, true, 256, true>(a, c.cluster, stream)
               : launch_rows<T, true, 256, false>(a, c.cluster, stream);
  if (!c.paired) return launch_rows<T, false, 128, false>(a, c.cluster, stream);
  return tma ? launch_rows<T, true, 128, true>(a, c.cluster, stream)
             : launch_rows<T, true, 128, false>(a, c.cluster, stream);
}

// The clusters of the one-block-per-SM kernels that fit at once, asked of the occupancy
// calculator for the 256-row one (the larger shared memory; the two-set 128-row kernel's
// registers already allow one block per SM, and the dtypes change neither).
WgmmaFit query_fit() {
  WgmmaFit fit;
  auto kernel = marlin_wgmma_tma_kernel<__nv_bfloat16, DType::f16, 256>;
  constexpr int kSmemBytes = Tile<256>::kSmemBytes;
  if (device::allow_shared_memory<marlin_wgmma_tma_kernel<__nv_bfloat16, DType::f16, 256>>(
          kSmemBytes) != cudaSuccess)
    return fit;
  for (int c = 1; c <= kMaxCluster; ++c) {
    cudaLaunchConfig_t config = {};
    cudaLaunchAttribute attribute[1];
    attribute[0].id = cudaLaunchAttributeClusterDimension;
    attribute[0].val.clusterDim.x = unsigned(c);
    attribute[0].val.clusterDim.y = 1;
    attribute[0].val.clusterDim.z = 1;
    config.gridDim = dim3(unsigned(c), 1, 1);
    config.blockDim = dim3(kTmaThreads, 1, 1);
    config.dynamicSmemBytes = kSmemBytes;
    config.attrs = attribute;
    config.numAttrs = 1;
    int n = 0;
    if (cudaOccupancyMaxActiveClusters(&n, kernel, &config) == cudaSuccess)
      fit.clusters[c] = n;
    else
      (void)cudaGetLastError();
  }
  return fit;
}

}  // namespace

bool wgmma_available() {
  // sm_90a code runs on compute capability 9.0 only; answered once per device.
  static std::atomic<int> known[64] = {};
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return false;
  std::atomic<int>& slot = known[dev % 64];
  int v = slot.load(std::memory_order_relaxed);
  if (v == 0) {
    int major = 0, minor = 0;
    const bool ok =
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) == cudaSuccess &&
        major == 9 && minor == 0;
    v = ok ? 1 : 2;
    slot.store(v, std::memory_order_relaxed);
  }
  return v == 1;
}

bool wgmma_takes(const GemmArgs& a) {
  return a.items == nullptr && a.epilogue == Epilogue::store && a.x_dtype != DType::f32 &&
         a.y_dtype == a.x_dtype && a.w.bits == 4 && a.w.columns == nullptr && a.w.group_slabs > 0 &&
         a.w.group_slabs % kSlabs == 0 && a.w.K % kStageK == 0 && a.w.N % 64 == 0 &&
         a.ldx % 8 == 0 && a.ldx <= (int64_t(1) << 22) &&
         reinterpret_cast<uintptr_t>(a.x) % 16 == 0 && a.w.K <= INT32_MAX / 2 &&
         a.M <= int64_t(65535) * 128;
}

WgmmaFit wgmma_fit() {
  static std::mutex mutex;
  static std::map<int, WgmmaFit> known;  // by device
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return WgmmaFit{};
  std::lock_guard<std::mutex> lock(mutex);
  auto it = known.find(dev);
  if (it == known.end()) it = known.emplace(dev, query_fit()).first;
  return it->second;
}

namespace {

// The largest split of K (up to kMaxCluster, at least 4 stages a rank) whose clusters of `tiles`
// blocks all fit at once, or 0 where even unsplit they do not.
int fitting_split(int64_t tiles, int64_t stages, const WgmmaFit& fit) {
  for (int split = kMaxCluster; split >= 1; --split)
    if ((split == 1 || stages / split >= 4) && tiles <= fit.clusters[split]) return split;
  return 0;
}

// Estimated µs of one wave of blocks `rows` high with `split` ranks: a rank's stages at a stage's
// time plus a block's start and finish (lines fitted to the H200 sweeps of both heights, 11 to
// 224 stages a rank: 128 rows 0.62 µs a stage + 8.7, 256 rows 0.81 + 12.1; within 10 % of most
// entries, 18 % at worst). Only the comparison of the two heights uses it.
double wave_estimate(int rows, int64_t stages, int split) {
  const double per_rank = double((stages + split - 1) / split);
  return rows == 256 ? 0.81 * per_rank + 12.1 : 0.62 * per_rank + 8.7;
}

}  // namespace

WgmmaConfig choose_wgmma_config(const GemmArgs& a, const WgmmaFit& fit) {
  // Measured on the H200 over six shapes at 64-1024 rows (docs/cuda.md, "Large M on the warpgroup
  // MMA"): with every block resident at once the two-set scheme wins, and a larger split wins
  // until its clusters no longer all fit (128 blocks in clusters of 4 ran as two waves there).
  // Where both block heights fit one wave, the one with the smaller estimate: 256-row blocks do
  // twice the MMA work per dequantized weight but cost more to start and finish, so they win on
  // long K (14336×4096 at 256 rows: 72.4 against 78.3 µs) and lose on short K (4096×4096: 30.6
  // against 27.6).
  WgmmaConfig c;
  const int64_t col_tiles = (a.w.N + 127) / 128, stages = a.w.K / kStageK;
  c.paired = true;
  double best = 0;
  for (int rows : {128, 256}) {
    if (rows == 256 && a.M <= 128) continue;
    const int split = fitting_split(col_tiles * ((a.M + rows - 1) / rows), stages, fit);
    if (split == 0) continue;
    const double t = wave_estimate(rows, stages, split);
    if (c.cluster == 0 || t < best) c.rows = rows, c.cluster = split, best = t;
  }
  if (c.cluster > 0) return c;
  // Not even one wave: unsplit, 256-row blocks above 128 rows (two sets: one block per SM), else
  // 128-row blocks with one set, two blocks per SM.
  c.cluster = 1;
  c.rows = a.M > 128 ? 256 : 128;
  c.paired = c.rows == 256;
  return c;
}

cudaError_t launch_marlin_wgmma(const GemmArgs& a, WgmmaConfig config, cudaStream_t stream) {
  if (!wgmma_takes(a) || config.cluster < 0 || config.cluster > kMaxCluster ||
      (config.rows != 128 && config.rows != 256) || (config.rows == 256 && !config.paired))
    return cudaErrorInvalidValue;
  if (a.M == 0 || a.w.N == 0) return cudaSuccess;
  if (config.cluster == 0) config = choose_wgmma_config(a, wgmma_fit());
  if (a.x_dtype == DType::f16) return launch_typed<__half>(a, config, stream);
  return launch_typed<__nv_bfloat16>(a, config, stream);
}

}  // namespace nibble::cuda
