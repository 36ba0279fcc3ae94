// The small-M Marlin kernel's split rule, host code: how many 64-column runs a block takes, how
// many blocks of a cluster split K, which register budget and which tile of rows, chosen from
// the layer's shape and the device's multiprocessor count as H200 sweeps measured best.
#include <algorithm>
#include <cstdint>

#include "launch.hpp"

namespace nibble::cuda {

namespace {
constexpr int kWarps = kStreamWarps;
constexpr int kRows = kStreamRows;
constexpr int kMaxCluster = kStreamMaxCluster;
}  // namespace

// The splits measured best on an H200 (docs/cuda.md, "Choosing the split" and "A ring of weight
// batches and the decode split"): decode and 9-16 rows on large layers want one wave of blocks
// of one run each (more only where the runs exceed two blocks per SM), K split over clusters of
// at most two, one block per SM where the blocks fit the SMs; layers with K and N up to 4096
// one run per block on the 255-register budget (below); other single tiles of rows about one to
// two blocks per SM, each over four adjacent runs (their words are contiguous, which DRAM streams
// best); several tiles of rows share the weight through L2 and want one run per block and
// clusters of two. MoE items are different experts: decode items take one wave of up to two
// blocks per SM where they fit, other items four runs per block and at most 64 slabs per warp.
StreamConfig choose_stream_config(const GemmArgs& a, int sm_count) {
  StreamConfig c;
  const int64_t runs = a.w.N / 64, slabs = a.w.K / 16;
  const int64_t items = a.items ? std::max<int64_t>(1, a.max_items) : (a.M + kRows - 1) / kRows;
  c.blocks_per_sm = 2;
  c.runs_per_block = 1;
  c.tile_rows = (a.items ? a.item_rows : a.M) <= 8 ? 8 : kRows;
  // The splits of one tile of rows on a large layer: about one to two blocks per SM (every
  // block of every item counted), four adjacent runs per block where that fits. `longest`
  // bounds the slabs one warp streams.
  auto one_wave = [&](int64_t tiles, int64_t longest, int64_t high_per_4sm = 7) {
    const int64_t low = int64_t(sm_count) * 95 / 100, high = int64_t(sm_count) * high_per_4sm / 4;
    for (int R : {4, 2, 1}) {
      if (R > runs && R > 1) continue;  // a block's warps on runs that do not exist
      for (int C : {1, 2, 4, 8}) {
        const int64_t blocks = (runs + R - 1) / R * C * tiles;
        if (blocks >= low && blocks <= high && slabs * R >= int64_t(C) * kWarps * 2 &&
            slabs * R <= longest * C * kWarps) {
          c.runs_per_block = R;
          c.cluster = C;
          return true;
        }
      }
    }
    return false;
  };
  if (a.items) {
    // Decode items (8 rows) split as one tile of a layer with runs × items runs, each warp
    // streaming at most 128 slabs: for a Mixtral-like gate/up at M = 1 (448 runs, 2 items)
    // four runs per block and no cluster, 224 blocks in one wave where one run per block made
    // 896 in 3.4 waves. Its down projection at M = 4 (64 runs, up to 9 items) would get 448
    // slabs per warp in one wave, which the slab limits keep out. A wave may fill both blocks of
    // every SM, and at most 64 slabs per warp come first: a Mixtral-like down projection at M = 1
    // (64 runs, 2 items) runs four runs per block over clusters of 8, 256 blocks of 56 slabs per
    // warp, where 128 blocks of 112 made the whole MoE 1.04× slower (bf16 h: 103.8 against
    // 100.2 µs).
    if (c.tile_rows == 8 && (one_wave(items, 64, 8) || one_wave(items, 128))) return c;
    // More items than one wave holds: four adjacent runs per block and the smallest cluster
    // that leaves each warp at most 64 slabs. Mixtral-like at M = 4 (9 items), against one run
    // per block and no cluster: gate/up (256 slabs) in clusters of 2 alone took the whole MoE
    // 0.89× the time, down (896 slabs) in clusters of 8 alone 0.85×; at M = 16 (items of 16
    // rows) 0.83× and 0.82×.
    c.runs_per_block = int(std::clamp<int64_t>(runs, 1, 4));
    while (c.runs_per_block & (c.runs_per_block - 1)) --c.runs_per_block;  // 1, 2 or 4
    c.cluster = 1;
    while (c.cluster < kMaxCluster && slabs * c.runs_per_block > int64_t(64) * c.cluster * kWarps)
      c.cluster *= 2;
    return c;
  }
  if (!a.items && a.M > 8 && a.M <= kRows && slabs >= 256 && slabs <= 1024) {
    // 9-16 rows on a layer with K from 4096 to 16384: one 16-row tile with the weight as A
    // (each dequantized fragment feeds the MMAs of both 8-row halves), one block per SM on the
    // 255-register budget (at 128 it spills), the fewest runs per block that keep the blocks
    // within the SMs, K split over clusters of two where that still fits. H100 sweep of every
    // split, M = 9 / 12 / 16, against the rules below (docs/cuda.md, "Staging with cp.async, and
    // one 16-row tile with the weight as A"): 14336×4096 19.4 / 27.2 / 28.7 µs against 28.0 /
    // 27.8 / 28.7 in two 8-row tiles, 4096×4096 10.1 / 10.2 / 10.9 against 10.4 / 10.4 / 11.0,
    // 4096×14336 (two runs per block, no cluster) 20.0 / 20.6 / 21.7 against 20.8 / 21.7 / 23.2
    // with the rows as A; 2048×2048 keeps two 8-row tiles (6.5 against 7.6-8.7).
    c.tile_rows = kRows;
    c.weights_as_a = 1;
    c.blocks_per_sm = 1;
    int R = 1;
    while (R < 8 && (runs + R - 1) / R > sm_count) R *= 2;
    c.runs_per_block = R;
    c.cluster = (runs + R - 1) / R * 2 <= sm_count ? 2 : 1;
    return c;
  }
  if (!a.items && a.M > 8 && a.M <= kRows && slabs >= 128 && runs <= sm_count &&
      runs * 4 >= int64_t(sm_count) * 9 / 10) {
    // 9-16 rows on a layer of at most one run per SM, and enough runs that two tiles over
    // clusters of two give blocks for ~0.9 of the SMs: two tiles of 8 rows with the weight as A,
    // K split over clusters of two, the fewest runs per block that keep the blocks within two
    // per SM, one block per SM where they fit. H200, M = 16, against 16-row tiles with the rows
    // as A split as below (docs/cuda.md, "A ring of weight batches and the decode split"):
    // 2048×2048 7.9 against 12.0 µs, 4096×4096 12.2 against 14.4, 8192×8192 30.3 against 40.8,
    // 28672×8192 103 against 156. Wider layers keep the 16-row tile, which shares each weight
    // word between all 16 rows (4096×14336 25.6 against 29.5 in two tiles, best splits of each).
    c.tile_rows = 8;
    const int64_t tiles = (a.M + 7) / 8;
    int R = 1;
    while (R < 8 && (runs + R - 1) / R * 2 * tiles > 2 * int64_t(sm_count)) R *= 2;
    c.runs_per_block = R;
    c.cluster = 2;
    c.blocks_per_sm = (runs + R - 1) / R * 2 * tiles <= sm_count ? 1 : 2;
    return c;
  }
  if (items == 1 && slabs <= 256 && runs <= 64) {
    // K and N up to 4096: one run per block (all 8 warps on it, the 255-register budget) and
    // the largest cluster that leaves each warp at least 8 slabs and one block per SM. H200
    // sweeps (docs/cuda.md, "Choosing the split"): 2048×2048, 4096×4096, 1024×4096 and
    // 4096×1024 at M = 1-16 run fastest so; 4096×4096 M = 1 11.7 µs against 14.3 with four runs
    // over a cluster of 8, M = 16 17.2 against 23.8.
    c.runs_per_block = 1;
    c.blocks_per_sm = 1;
    c.cluster = 1;
    while (c.cluster < kMaxCluster && slabs >= int64_t(2 * c.cluster) * 8 * kWarps &&
           runs * 2 * c.cluster <= int64_t(sm_count))
      c.cluster *= 2;
    return c;
  }
  if (items == 1 && c.tile_rows == 8 && runs * 2 >= int64_t(sm_count) * 9 / 10) {
    // Decode on a layer whose runs over clusters of two give blocks for ~0.9 of the SMs (the
    // weight as A): one run per block (more only where the runs alone would take more than two
    // blocks per SM), K split over a cluster of two where that still fits one wave, one block per
    // SM on the 255-register budget where the blocks are at most the SMs, else two on the
    // 128-register one. Clusters of three or more ranks were slower on every large layer swept, as
    // were several runs per block where one run per block fills the wave. H200 sweep of every
    // split, M = 1 (docs/cuda.md, "A ring of weight batches and the decode split"): 14336×4096 15.2
    // µs in clusters of two at one block per SM against 18.8 with two runs per block over clusters
    // of 6; 8192×8192 15.5 against 20.5 and 28672×8192 41.7 against 61.8 in clusters of two at two
    // blocks per SM; 4096×14336 unclustered 14.2 against 14.9.
    int R = 1;
    while (R < 8 && (runs + R - 1) / R > 2 * int64_t(sm_count)) R *= 2;
    const int64_t strips = (runs + R - 1) / R;
    const int C = strips * 2 <= 2 * int64_t(sm_count) && slabs >= 2 * 2 * kWarps ? 2 : 1;
    c.runs_per_block = R;
    c.cluster = C;
    c.blocks_per_sm = strips * C <= sm_count ? 1 : 2;
    return c;
  }
  if (items == 1 && one_wave(1, slabs)) return c;
  c.runs_per_block = 1;
  c.cluster = slabs >= 2 * 2 * kWarps ? 2 : 1;
  return c;
}

// Decode tiles of a layer whose warps each stream at least 16 slabs take a ring of batches where
// that measured faster. On the H200 a ring of two:
// always on the 255-register budget (one block per SM: 14336×4096 M = 1 15.2 against 18.1 µs in
// registers, 4096×4096 7.2 against 7.6), on the 128-register one only at M = 1 (28672×8192 41.7
// against 44.3, 4096×14336 14.2 against 14.5; at M = 4 and 8 it was 2-40 % slower); deeper rings
// were slower at every split swept. Since each decode instantiation compiles only its own loop
// (no spills at 128 registers), an H100 sweep: three batches where a warp streams 48 slabs or
// more at one block per SM (14336×4096, 56 slabs a warp, M = 1 / 4 / 8: 15.3 / 17.4 / 20.1 µs
// against 16.2 / 18.2 / 20.9 with two; 4096×4096, 16 a warp, keeps two: 7.3 against 7.5 with
// three), and a ring of two at two blocks per SM up to M = 4 (4096×14336 M = 4 16.2 against 16.7 µs
// in registers; at M = 8 still slower, 24.2 against 18.7). docs/cuda.md, "A ring of weight batches
// and the decode split" and "One loop per decode instantiation".
// Decode MoE items (experts of 8 rows) take a ring of two under the same 16-slab floor: H100,
// Mixtral-like (at M = 1 gate/up 128 slabs a warp, down 56), four pairs alternating with registers
// in two starts, M = 1 97.3-98.1 against 99.3-99.9 µs, M = 4 215.7-216.5 against 221.7-222.5,
// M = 16 (16-row tiles) unchanged; a ring of three was slower (111.1 and 247.9), and the layer rule
// above (two only at M <= 4 on two blocks per SM) gained at M = 1 alone (docs/cuda.md, "Rings for
// MoE items"). 16-row tiles with the weight as A take a ring of two at one block per SM: in the
// H100 sweep of every split at M = 9-16 the fastest ring on 4096×4096 and 4096×14336, within 1 %
// on 2048×2048; on 14336×4096 at 12 and 16 rows deeper rings were 3-7 % faster because their
// smaller windows split K evenly, as equal windows now do (docs/cuda.md, "Staging with cp.async,
// and one 16-row tile with the weight as A"). With the rows as A, none.
int choose_weight_ring(const GemmArgs& a, const StreamConfig& c) {
  const bool wide_weights_a = c.tile_rows != 8 && c.weights_as_a == 1;
  if (c.tile_rows != 8 && !wide_weights_a) return 0;
  const int64_t block_slabs = (a.w.K / 16 + c.cluster - 1) / c.cluster;
  const int64_t warp_slabs = block_slabs * c.runs_per_block / kWarps;
  if (warp_slabs < 16) return 0;
  if (wide_weights_a) return c.blocks_per_sm == 1 ? 2 : 0;
  if (a.items) return 2;
  if (c.blocks_per_sm == 1) return warp_slabs >= 48 ? 3 : 2;
  return a.M <= 4 ? 2 : 0;
}

}  // namespace nibble::cuda
