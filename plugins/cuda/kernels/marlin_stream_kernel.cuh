// The small-M Marlin kernel (marlin_stream.cu picks its form and launches it): memory-bound, so
// every byte of the weight is read once, straight from HBM into registers (one 16-byte load per
// lane covers a 16 × 64 slab of a 4-bit weight),
// dequantized to exact q − z in the MMA type and multiplied on the tensor cores against up to 16
// activation rows staged in shared memory. Scales are applied to the fp32 accumulators once per
// group (so no scale is ever rounded to 16 bits), K is split over the 8 warps of a block and
// over the blocks of a thread-block cluster, whose partial sums meet in distributed shared
// memory — one launch, no global scratch.
//
// Two ways to put a tile of rows on the m16n8k16 MMA. With the weight as the A operand (16 output
// channels × 16 inputs) the rows are B's 8 columns: a 16 × 64 slab takes 4 MMAs per 8 rows (a
// tile of 8 or 16), and a lane's group sums fit in 16 registers per 8 rows, so the per-group
// scaling stays in registers. The dequantized B fragments of two adjacent n8 tiles are exactly
// one A fragment (A rows g and g + 8 are those tiles' column g), so the Marlin layout serves
// both. With the rows as A (16 × 16, tiles of 16) the weight is B: 8 MMAs per slab, the group
// sums flushed into shared memory.
#pragma once

#include <cooperative_groups.h>

#include <algorithm>
#include <type_traits>

#include "launch.hpp"
#include "marlin_lane.cuh"
#include "mma.cuh"

namespace nibble::cuda::stream_kernel {

namespace cg = cooperative_groups;
using device::Bits16;
using device::LaneScales;
using device::load_act;
using device::load_zeros;
using device::split32;
using device::store_out;

constexpr int kWarps = kStreamWarps;
constexpr int kThreads = kWarps * 32;
constexpr int kRows = kStreamRows;
constexpr int kMaxCluster = kStreamMaxCluster;
// Shared memory for the staged activations of one window of K (two blocks fit on one SM).
constexpr int kSmemBudget = 72 * 1024;
constexpr int kSumBytes = kWarps * kRows * 72 * int(sizeof(float));
// With a ring of weight batches: all of a block's shared memory, at one or two blocks to an SM
// (228 KiB on sm_90, 1 KiB of it reserved per block).
constexpr int kRingBlockSmem[2] = {220 * 1024, 112 * 1024};
// One batch of a warp's weight words: 4 slabs of 4-bit or 2 of 8-bit, 16 bytes per lane each.
constexpr int kRingBatchBytes = 4 * 16 * 32;

template <class A>
using MmaType = std::conditional_t<std::is_same_v<A, float>, __nv_bfloat16, A>;
template <class A>
constexpr int kPlanes = std::is_same_v<A, float> ? 2 : 1;

// A warp's fp32 sums in shared memory: [warp][16 rows][kSumLd], a row padded so that the lanes'
// (row, column pair) stores of a flush fall on distinct banks.
constexpr int kSumLd = 72;
// The push reduction's inbox (rows 8-15 of every warp's sums, tiles of 8 rows) holds each rank's
// share of R · 8 · 64 outputs, rounded up to whole runs of 64 per rank, from every rank.
static_assert((kWarps * 8 + kMaxCluster - 1) * 64 <= kWarps * 8 * kSumLd, "inbox too small");
__device__ __forceinline__ int sum_index(int warp, int row, int col) {
  return (warp * kRows + row) * kSumLd + col;
}

// Where a warp's weight batches wait between their loads and their MMAs: two register buffers,
// the shared-memory ring, or either, as ring_batches says at run time. Decode tiles (8 rows, the
// weight as A) compile one of the two, so an instantiation holds only the loop it runs (less
// code, fewer registers: faster at M = 1-8, docs/cuda.md); 16-row tiles with the rows as A
// compiled that way were slower, so 16-row tiles of either form keep both.
enum class Batches { registers, ring, either };

// kTile: rows per tile, 8 or 16 with the weight as A (kWeightsA), 16 with the rows as A.
template <class A, int BITS, int kMinBlocks, bool kWeightsA, Batches kBatches, int kTile>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    marlin_stream_kernel(const GemmArgs a, int runs_per_block, int cluster, int window_slabs,
                         int staged_rows, int ring_batches) {
  static_assert(kTile == 8 || kTile == kRows, "tiles of 8 or 16 rows");
  static_assert(kWeightsA || kTile == kRows, "the rows as A take 16-row tiles");
  using T = MmaType<A>;
  constexpr int P = kPlanes<A>;
  // Weights as A: n8 tiles of rows (B fragments) per slab, and m16 × n8 sums per lane.
  constexpr int kRowTiles = kTile / 8;
  constexpr int kWordsPerLane = BITS / 4;  // uint4 per lane per slab
  constexpr int kBatch = BITS == 4 ? 4 : 2;
  extern __shared__ uint4 smem[];

  int strip, rank;
  device::cluster_place(cluster, strip, rank);
  const MarlinDevice& w = a.w;
  // Launched with programmatic stream serialization, the next kernel on the stream may be
  // launched once every block of this one has started, and its blocks take SMs as this one's
  // leave; it waits in device::wait_for_previous_kernel before it touches what this one writes.
  device::allow_next_kernel();
  // The push reduction below writes into other blocks' shared memory before any cluster-wide
  // sync: this arrival, waited for just before it, makes sure every block has started.
  // Only tiles of 8 rows leave rows 8-15 of the warps' sums free for its inbox.
  const bool push_reduction = kWeightsA && kTile == 8 && cluster > 1;
  const bool use_ring = kBatches == Batches::either ? ring_batches > 0 : kBatches == Batches::ring;
  if (push_reduction) device::cluster_arrive();
  int expert = 0;
  int64_t row0 = 0;
  int rows = 0;
  if (a.items) {
    device::wait_for_previous_kernel();                // the items are the routing kernel's output
    if (int64_t(blockIdx.y) >= *a.item_count) return;  // the whole cluster shares blockIdx.y
    const int4 item = a.items[blockIdx.y];
    expert = item.x;
    row0 = item.y;
    rows = item.z < kTile ? item.z : kTile;  // the launcher admits no larger item
  } else {
    row0 = int64_t(blockIdx.y) * kTile;
    rows = int(a.M - row0 < kTile ? a.M - row0 : kTile);
  }
  const uint32_t* qweight = w.qweight + expert * w.expert_qweight;
  const void* scales = static_cast<const char*>(w.scales) +
                       expert * w.expert_scales * int64_t(dtype_size(w.scale_dtype));
  const uint32_t* zeros = w.zeros ? w.zeros + expert * w.expert_zeros : nullptr;
  const int32_t* slab_groups = w.slab_groups + expert * w.expert_slabs;
  const int32_t* columns = w.columns ? w.columns + expert * w.expert_columns : nullptr;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, tq = lane % 4;
  // The staged row whose address this lane gives ldmatrix (weights as A: lanes 16-31 address
  // rows 8-15 in tiles of 16).
  const int x_row = std::min(kWeightsA ? lane % 8 + (kTile == 16 ? 8 * (lane / 16) : 0) : lane % 16,
                             staged_rows - 1);
  // Runs per block are 1, 2, 4 or 8 (the launcher checks): shifts, not divisions.
  const int R = runs_per_block, r_shift = __ffs(R) - 1, KP = kWarps >> r_shift;
  const int run = warp & (R - 1), kp = warp >> r_shift;
  const int64_t n_run = (int64_t(strip) * R + run) * 64;
  const bool run_valid = n_run < w.N;
  // Slab indices in 32 bits (K / 16 < 2^27), split without 64-bit division.
  int block_begin, block_end;
  split32(int(w.K / 16), cluster, rank, block_begin, block_end);

  // Shared memory: the warps' fp32 sums, the staged activations of one window of K (the first
  // `staged_rows` rows of a tile: tile rows past them read the last staged one, whose products
  // land in outputs that are never stored), then each warp's ring of weight batches.
  float* sums = reinterpret_cast<float*>(smem);
  const int64_t ld_smem = int64_t(window_slabs) * 16 + 8;
  T* sa = reinterpret_cast<T*>(sums + kWarps * kRows * kSumLd);
  const int64_t plane = int64_t(staged_rows) * ld_smem;
  constexpr int kRingWords = kBatch * kWordsPerLane * 32;  // uint4 of one batch of a warp
  static_assert(kRingWords * 16 == kRingBatchBytes, "ring batch size");
  uint4* const ring = reinterpret_cast<uint4*>(sa + P * plane) +
                      int64_t(threadIdx.x / 32) * ring_batches * kRingWords + threadIdx.x % 32;
  if constexpr (!kWeightsA) {  // weights as A: each warp stores its sums once, at the end
    float4* mine = reinterpret_cast<float4*>(sums + warp * kRows * kSumLd);
    for (int i = lane; i < kRows * kSumLd / 4; i += 32) mine[i] = make_float4(0.f, 0.f, 0.f, 0.f);
  }
  // Weights as A: the lane's sums over all its slabs, (4h + j, i) = channel 8(2j + i / 2) + g of
  // the run, row 8h + 2 · tq + i % 2.
  float total[4 * kRowTiles][4];
#pragma unroll
  for (int j = 0; j < 4 * kRowTiles; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) total[j][i] = 0.f;

  const int64_t slab_stride = w.N * BITS / 8;  // uint4 per slab row
  const uint4* q_lane =
      reinterpret_cast<const uint4*>(qweight) + (n_run / 64) * (8 * BITS) + lane * kWordsPerLane;

  // Two register buffers of kBatch slabs' words take turns (the loop below runs two batches per
  // iteration): one is in flight while the other computes, and no words are copied between
  // them (copying `next` into `cur` cost about 40 moves per batch).
  uint4 buf0[kBatch][kWordsPerLane], buf1[kBatch][kWordsPerLane];
  auto fetch = [&](uint4(&buf)[kBatch][kWordsPerLane], int first, int end) {
    const uint4* q = q_lane + int64_t(first) * slab_stride;
    if (first + kBatch <= end) {  // a whole batch: no per-slab checks
#pragma unroll
      for (int u = 0; u < kBatch; ++u)
#pragma unroll
        for (int v = 0; v < kWordsPerLane; ++v)
          buf[u][v] = device::load_stream(q + u * slab_stride + v);
    } else {
#pragma unroll
      for (int u = 0; u < kBatch; ++u)
        if (first + u < end)
#pragma unroll
          for (int v = 0; v < kWordsPerLane; ++v)
            buf[u][v] = device::load_stream(q + u * slab_stride + v);
    }
  };
  // The warp's slabs [s0, s1) of the window starting at slab ws.
  auto warp_slabs = [&](int ws, int& s0, int& s1) {
    const int we = block_end < ws + window_slabs ? block_end : ws + window_slabs;
    split32(we - ws, KP, kp, s0, s1);
    s0 += ws, s1 += ws;
  };
  // With a ring (ring_batches > 0) the words go to shared memory with cp.async instead, batch i
  // of the warp's slabs into slot i % ring_batches, ring_batches - 1 batches ahead of the one
  // computed: more bytes in flight than two register buffers hold, in no registers. Each lane
  // reads back only what it copied itself, so no barrier is needed between the lanes.
  auto fetch_ring = [&](int slot, int first, int end) {
    uint4* dst = ring + slot * kRingWords;
    const uint4* q = q_lane + int64_t(first) * slab_stride;
#pragma unroll
    for (int u = 0; u < kBatch; ++u)
      if (first + u < end)
#pragma unroll
        for (int v = 0; v < kWordsPerLane; ++v)
          device::cp_async16(dst + (u * kWordsPerLane + v) * 32, q + u * slab_stride + v);
    device::cp_async_commit();  // also when empty: the groups count batches
  };
  auto ring_prologue = [&](int s0, int s1) {
    for (int i = 0; i + 1 < ring_batches; ++i) fetch_ring(i, s0 + i * kBatch, s1);
  };
  // The first batches of the warp's slabs in the window starting at slab ws.
  auto start_window = [&](int ws) {
    int s0, s1;
    warp_slabs(ws, s0, s1);
    if (run_valid && s0 < s1) {
      if (use_ring)
        ring_prologue(s0, s1);
      else
        fetch(buf0, s0, s1);
    }
  };
  // The weight does not depend on earlier kernels: the first batches are on their way before
  // this kernel waits for the previous one and stages its activations.
  start_window(block_begin);
  if (!a.items) device::wait_for_previous_kernel();

  for (int ws = block_begin; ws < block_end; ws += window_slabs) {
    const int we = block_end < ws + window_slabs ? block_end : ws + window_slabs;
    const int64_t width = int64_t(we - ws) * 16, k0 = int64_t(ws) * 16;
    // A later window's first batches are on their way while its activations are staged.
    if (ws != block_begin) start_window(ws);
    __syncthreads();  // the previous window's activations are consumed
    // Stage x[rows][k0, k0 + width) as P planes of T (f32: hi = bf16(x), lo = bf16(x − hi)).
    // Rows past `rows` stay unset: an output row depends only on its own activation row (an A
    // row, or a B column with the weight as A), and those outputs are never stored. Rows in the
    // MMA type are copied with cp.async, every copy of the window in flight at once, kept in L1
    // for the other block on the multiprocessor, which stages the same inputs where the split
    // has no cluster (a loop of loads and stores waited for each load before the next went out:
    // docs/cuda.md, "Staging with cp.async").
    const bool vec = std::is_same_v<A, T> && columns == nullptr && a.ldx % 8 == 0 &&
                     reinterpret_cast<uintptr_t>(a.x) % 16 == 0;
    for (int r = 0; r < rows; ++r) {
      const int64_t xr = a.x_by_token ? a.sorted[row0 + r] / a.top_k : row0 + r;
      const char* xrow =
          static_cast<const char*>(a.x) + xr * a.ldx * int64_t(dtype_size(a.x_dtype));
      if (vec) {
        const uint4* src = reinterpret_cast<const uint4*>(xrow) + k0 / 8;
        uint4* dst = reinterpret_cast<uint4*>(sa + r * ld_smem);
        for (int64_t c = threadIdx.x; c < width / 8; c += kThreads)
          device::cp_async16_l1(dst + c, src + c);
      } else {
        for (int64_t c = threadIdx.x; c < width; c += kThreads) {
          const int64_t k = columns ? columns[k0 + c] : k0 + c;
          const float v = load_act(xrow, k, a.x_dtype);
          if constexpr (P == 2) {
            const __nv_bfloat16 hi = __float2bfloat16_rn(v);
            sa[r * ld_smem + c] = hi;
            sa[plane + r * ld_smem + c] = __float2bfloat16_rn(v - __bfloat162float(hi));
          } else {
            sa[r * ld_smem + c] = T(v);
          }
        }
      }
    }
    if (vec) {  // the ring's batches in flight complete with the copies, which they precede
      device::cp_async_commit();
      device::cp_async_wait<0>();
    }
    __syncthreads();
    if (!run_valid) continue;
    int s0, s1;
    warp_slabs(ws, s0, s1);
    if (s0 >= s1) continue;

    // The current group's fp32 sums: 8 n8 tiles of C (rows as A), or 4 m16 tiles per 8 rows
    // (weights as A, indexed as `total`).
    constexpr int kParts = kWeightsA ? 4 * kRowTiles : 8;
    float tmp[kParts][4];
#pragma unroll
    for (int t = 0; t < kParts; ++t)
#pragma unroll
      for (int i = 0; i < 4; ++i) tmp[t][i] = 0.f;
    int group = int(device::slab_group(w, slab_groups, s0));
    const int g = lane / 4;
    std::conditional_t<kWeightsA, device::ChannelScales, LaneScales> sc;
    sc.load(w, scales, group, n_run, kWeightsA ? g : tq);
    uint32_t zop[8];
    load_zeros<T, BITS>(w, zeros, group, n_run, lane, zop);
    // Tiles with the weight as A load regular groups' zero points a group ahead: the first slab
    // of a group needs them at once, and a load from memory at each change stalled the warp
    // (asymmetric weights ran up to 1.2x slower than symmetric ones at M = 1, more where a warp
    // crosses more groups). Tiles with the rows as A keep their registers: there the prefetch
    // spilled and lost 5 %.
    // `zero_ahead` is the group whose words `zero_words` hold (-1: none).
    device::ZeroWords<BITS> zero_words{};
    int zero_ahead = -1;
    auto load_ahead = [&](int gn) {
      if (kWeightsA && zeros && w.group_slabs != 0 && gn * w.group_slabs < s1) {
        zero_words = device::load_zero_words<BITS>(w, zeros, gn, n_run, lane);
        zero_ahead = gn;
      }
    };
    load_ahead(group + 1);

    // sums += tmp · scale, once per group: fp32 partial products times the fp32 scale. The scale
    // dtype and whether the block has rows past 8 (the C rows g + 8) are the same for the whole
    // block, so a flush runs one straight-line body: with 16-bit scales and at most 8 rows
    // (decode) 8 × (2 FFMA and one shared load and store), where a branch per tile and both row
    // halves were 2-3× that.
    float* const mine = sums + warp * kRows * kSumLd;
    auto flush_body = [&](auto scale_of, auto lower) {
#pragma unroll
      for (int t = 0; t < 8; ++t) {
        const float2 sc2 = scale_of(t);
        float2* top = reinterpret_cast<float2*>(mine + g * kSumLd + 8 * t + 2 * tq);
        float2 u = *top;
        u.x += tmp[t][0] * sc2.x;
        u.y += tmp[t][1] * sc2.y;
        *top = u;
        if constexpr (decltype(lower)::value) {
          float2* bottom = reinterpret_cast<float2*>(mine + (g + 8) * kSumLd + 8 * t + 2 * tq);
          float2 v = *bottom;
          v.x += tmp[t][2] * sc2.x;
          v.y += tmp[t][3] * sc2.y;
          *bottom = v;
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) tmp[t][i] = 0.f;
      }
    };
    // Weights as A: total += tmp · scale in registers, 16 FFMA per group and 8 rows.
    auto flush_a = [&](auto scale_of) {
#pragma unroll
      for (int j = 0; j < kParts; ++j) {
        const float2 s2 = scale_of(j % 4);
        total[j][0] += tmp[j][0] * s2.x;
        total[j][1] += tmp[j][1] * s2.x;
        total[j][2] += tmp[j][2] * s2.y;
        total[j][3] += tmp[j][3] * s2.y;
#pragma unroll
        for (int i = 0; i < 4; ++i) tmp[j][i] = 0.f;
      }
    };
    const bool lower_rows = rows > 8;
    auto flush = [&]() {
      if constexpr (kWeightsA) {
        if (sc.f32)
          flush_a([&](int j) { return sc.get_f32(j); });
        else
          flush_a([&](int j) { return sc.get_16(j); });
      } else if (sc.f32) {
        flush_body([&](int t) { return sc.get_f32(t); }, std::true_type{});
      } else if (lower_rows) {
        flush_body([&](int t) { return sc.get_16(t); }, std::true_type{});
      } else {
        flush_body([&](int t) { return sc.get_16(t); }, std::false_type{});
      }
    };
    // Regular groups change every group_slabs slabs; act-order ones are read per slab.
    int next_change = w.group_slabs ? (group + 1) * w.group_slabs : 0;

    // One slab: the activations' fragments from shared memory, the lane's words dequantized,
    // 8 MMAs (weights as A: 4; f32 activations twice as many).
    auto compute = [&](const uint4(&words_u)[kWordsPerLane], int s) {
      const int kk = int(s - ws) * 16;
      if constexpr (kWeightsA) {
        // B: rows 0-7 (and 8-15) × the slab's 16 inputs (lanes 0-7 address matrix 0, 8-15
        // matrix 1, 16-31 those of rows 8-15).
        uint32_t xb[P][2 * kRowTiles];
#pragma unroll
        for (int p = 0; p < P; ++p) {
          const T* at = sa + p * plane + x_row * ld_smem + kk + ((lane / 8) % 2) * 8;
          if constexpr (kTile == 8)
            device::ldmatrix_x2(xb[p], at);
          else
            device::ldmatrix_x4(xb[p], at);
        }
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          uint32_t b0[2], b1[2];  // n8 tiles 2j and 2j + 1 as B fragments
          if constexpr (BITS == 4) {
            const uint32_t word = j == 0   ? words_u[0].x
                                  : j == 1 ? words_u[0].y
                                  : j == 2 ? words_u[0].z
                                           : words_u[0].w;
            device::dequant4<T>(word, zop[2 * j], zop[2 * j + 1], b0, b1);
          } else {
            const uint4& u = words_u[j / 2];
            device::dequant8<T>(j % 2 ? u.z : u.x, zop[2 * j], b0);
            device::dequant8<T>(j % 2 ? u.w : u.y, zop[2 * j + 1], b1);
          }
          const uint32_t wa[4] = {b0[0], b1[0], b0[1], b1[1]};
#pragma unroll
          for (int p = 0; p < P; ++p)
#pragma unroll
            for (int h = 0; h < kRowTiles; ++h) device::mma<T>(wa, xb[p] + 2 * h, tmp[4 * h + j]);
        }
      } else {
        uint32_t af[P][4];
#pragma unroll
        for (int p = 0; p < P; ++p)
          device::ldmatrix_x4(af[p], sa + p * plane + x_row * ld_smem + kk + (lane / 16) * 8);
        if constexpr (BITS == 4) {
          const uint32_t words[4] = {words_u[0].x, words_u[0].y, words_u[0].z, words_u[0].w};
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            uint32_t b0[2], b1[2];
            device::dequant4<T>(words[j], zop[2 * j], zop[2 * j + 1], b0, b1);
#pragma unroll
            for (int p = 0; p < P; ++p) {
              device::mma<T>(af[p], b0, tmp[2 * j]);
              device::mma<T>(af[p], b1, tmp[2 * j + 1]);
            }
          }
        } else {
          const uint32_t words[8] = {words_u[0].x, words_u[0].y, words_u[0].z, words_u[0].w,
                                     words_u[1].x, words_u[1].y, words_u[1].z, words_u[1].w};
#pragma unroll
          for (int t = 0; t < 8; ++t) {
            uint32_t b[2];
            device::dequant8<T>(words[t], zop[t], b);
#pragma unroll
            for (int p = 0; p < P; ++p) device::mma<T>(af[p], b, tmp[t]);
          }
        }
      }
    };
    auto change_group = [&](int gn) {
      flush();
      group = gn;
      next_change += w.group_slabs;
      sc.load(w, scales, group, n_run, kWeightsA ? g : tq);
      if (group == zero_ahead) {
        device::zeros_from_words<T, BITS>(zero_words, zop);
        load_ahead(group + 1);
      } else {
        load_zeros<T, BITS>(w, zeros, group, n_run, lane, zop);
      }
    };
    // The batch of slabs [sb, min(sb + kBatch, s1)), its words in `cur`.
    auto run_batch = [&](const uint4(&cur)[kBatch][kWordsPerLane], int sb) {
      // A whole batch inside one regular group runs without per-slab checks (a change at its
      // first slab is made first; groups of 2 slabs can change again inside the batch).
      if (w.group_slabs != 0 && sb == next_change) change_group(group + 1);
      const bool whole = sb + kBatch <= s1 && w.group_slabs != 0 && next_change >= sb + kBatch;
      if (whole) {
#pragma unroll
        for (int u = 0; u < kBatch; ++u) compute(cur[u], sb + u);
      } else {
#pragma unroll
        for (int u = 0; u < kBatch; ++u) {
          const int s = sb + u;
          if (s >= s1) break;
          const int gs =
              w.group_slabs ? (s == next_change ? group + 1 : group) : __ldg(slab_groups + s);
          if (gs != group) change_group(gs);
          compute(cur[u], s);
        }
      }
    };

    if (use_ring) {
      int slot = 0;
      for (int sb = s0; sb < s1; sb += kBatch) {
        device::cp_async_wait_upto(ring_batches - 2);  // batch `slot` has landed
        uint4 cur[kBatch][kWordsPerLane];
        const uint4* src = ring + slot * kRingWords;
#pragma unroll
        for (int u = 0; u < kBatch; ++u)
#pragma unroll
          for (int v = 0; v < kWordsPerLane; ++v) cur[u][v] = src[(u * kWordsPerLane + v) * 32];
        // The slot computed last is free: its words were consumed by that batch's MMAs.
        fetch_ring(slot == 0 ? ring_batches - 1 : slot - 1, sb + (ring_batches - 1) * kBatch, s1);
        run_batch(cur, sb);
        slot = slot + 1 == ring_batches ? 0 : slot + 1;
      }
    } else {
      for (int sb = s0; sb < s1; sb += 2 * kBatch) {
        if (sb + kBatch < s1) fetch(buf1, sb + kBatch, s1);  // in flight while buf0 computes
        run_batch(buf0, sb);
        if (sb + kBatch >= s1) break;
        if (sb + 2 * kBatch < s1)
          fetch(buf0, sb + 2 * kBatch, s1);  // in flight while buf1 computes
        run_batch(buf1, sb + kBatch);
      }
    }
    flush();
  }
  if constexpr (kWeightsA) {
    float* const mine = sums + warp * kRows * kSumLd;
    const int g = lane / 4;
#pragma unroll
    for (int t = 0; t < 4 * kRowTiles; ++t)
#pragma unroll
      for (int i = 0; i < 4; ++i)
        mine[(8 * (t / 4) + 2 * tq + i % 2) * kSumLd + 8 * (2 * (t % 4) + i / 2) + g] = total[t][i];
  }

  // Reduce: the KP warps of each run, then the cluster's blocks through distributed shared
  // memory, each rank finishing a share of the outputs, summed over the ranks in rank order.
  __syncthreads();
  const int outputs = R * rows * 64;         // rows past `rows` are never stored
  const device::SmallDivisor by_rows(rows);  // rows >= 1; (e >> 6) < R · rows <= 128
  const bool swiglu = a.epilogue == Epilogue::swiglu;
  // Output e (run r, row, column col) with its sum v and, for swiglu, the sum of its up column.
  auto finish = [&](int e, float v, float up) {
    const int r = by_rows.quot(e >> 6), row = by_rows.rem(e >> 6), col = e & 63;
    const int64_t n = (int64_t(strip) * R + r) * 64 + col;
    const int64_t out_row = a.y_by_pair ? a.sorted[row0 + row] : row0 + row;
    if (swiglu) {
      const int64_t i = (int64_t(strip) * R + r) * 32 + col;
      store_out(a.y, out_row * a.ldy + i, a.y_dtype, v / (1.f + __expf(-v)) * up);
    } else {
      if (a.bias) v += a.bias[n];
      store_out(a.y, out_row * a.ldy + n, a.y_dtype, v);
    }
  };
  auto warps_sum = [&](int e) {
    const int r = by_rows.quot(e >> 6), row = by_rows.rem(e >> 6), col = e & 63;
    float v = 0.f;
    for (int k = 0; k < KP; ++k) v += sums[sum_index(k * R + r, row, col)];
    return v;
  };
  auto stored = [&](int e) {  // whether output e is written (its run exists, not an up column)
    const int r = by_rows.quot(e >> 6), col = e & 63;
    return (int64_t(strip) * R + r) * 64 + col < w.N && !(swiglu && col >= 32);
  };
  cg::cluster_group cl = cg::this_cluster();
  if constexpr (kWeightsA) {
    if (push_reduction) {
      // Up to 8 rows, rows 8-15 of every warp's sums are free from the start: each rank pushes
      // its sums into an inbox there at the owner of each output, in whole rows of 64 (a
      // swiglu output and its up column stay together), and after one cluster barrier reads
      // only its own memory — no rank waits for the others' reads before it leaves.
      const int units = outputs / 64, per = (units + cluster - 1) / cluster, span = per * 64;
      const device::SmallDivisor by_per(per);  // (e >> 6) < units <= 64
      constexpr int kBox = 8 * kSumLd;         // one warp's rows 8-15
      auto inbox = [&](int i) { return (i / kBox) * (kRows * kSumLd) + kBox + i % kBox; };
      device::cluster_wait();
      for (int e = threadIdx.x; e < outputs; e += kThreads) {
        const int q = by_per.quot(e >> 6);
        cl.map_shared_rank(sums, q)[inbox(rank * span + e - q * span)] = warps_sum(e);
      }
      cl.sync();
      const int first = rank * span, last = std::min(outputs, first + span);
      for (int e = first + threadIdx.x; e < last; e += kThreads) {
        if (!stored(e)) continue;
        float v = 0.f, up = 0.f;
        for (int q = 0; q < cluster; ++q) {
          v += sums[inbox(q * span + e - first)];
          if (swiglu) up += sums[inbox(q * span + e - first + 32)];
        }
        finish(e, v, up);
      }
      return;
    }
  }
  for (int e = threadIdx.x; e < outputs; e += kThreads) {
    const int r = by_rows.quot(e >> 6), row = by_rows.rem(e >> 6), col = e & 63;
    sums[sum_index(r, row, col)] = warps_sum(e);  // read above by this thread only
  }
  int first = 0, last = outputs;
  if (cluster > 1) {
    cl.sync();
    split32(outputs, cluster, rank, first, last);
  } else {
    __syncthreads();
  }
  for (int e = first + threadIdx.x; e < last; e += kThreads) {
    if (!stored(e)) continue;
    const int r = by_rows.quot(e >> 6), row = by_rows.rem(e >> 6), col = e & 63;
    float v = 0.f, up = 0.f;
    const int at = sum_index(r, row, col), at_up = swiglu ? sum_index(r, row, col + 32) : 0;
    for (int q = 0; q < cluster; ++q) {
      const float* src = cluster > 1 ? cl.map_shared_rank(sums, q) : sums;
      v += src[at];
      if (swiglu) up += src[at_up];
    }
    finish(e, v, up);
  }
  if (cluster > 1) cl.sync();  // no block leaves while another reads its shared memory
}

}  // namespace nibble::cuda::stream_kernel
