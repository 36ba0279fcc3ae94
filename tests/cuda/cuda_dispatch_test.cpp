// The CUDA backend's host-side rules, no GPU needed: the small-M kernel's split, the large-M
// plan of the dequantizing GEMM, what the warpgroup-MMA kernel takes and its configuration,
// which large-M kernel linear_marlin runs, and the kernels' division of small counts. Each checks
// the choices the H200 sweeps measured fastest (docs/cuda.md) and that every choice is one the
// launchers take.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <string>
#include <utility>
#include <vector>

#include "dequant_gemm.hpp"
#include "launch.hpp"
#include "small_divisor.hpp"

namespace nibble::test {
namespace {

// The kernels divide small counts (an output's run and row in the reduction) by a multiply and
// a shift: the same quotient and remainder as the division for every count and divisor it may
// take, and for the largest ones the kernels give it.
TEST(CudaSmallDivisor, AgreesWithDivisionForEverySmallCountAndDivisor) {
  int wrong = 0;
  for (int d = 1; d <= 256; ++d) {
    const cuda::device::SmallDivisor by(d);
    for (int n = 0; n < 256; ++n) wrong += by.quot(n) != n / d || by.rem(n) != n % d;
  }
  EXPECT_EQ(wrong, 0);
  EXPECT_EQ(cuda::device::SmallDivisor(16).quot(127), 7);  // R · rows - 1 at 8 runs of 16 rows
  EXPECT_EQ(cuda::device::SmallDivisor(3).rem(127), 1);
}

// The small-M split rule (host code, no GPU needed) on a 132-SM device: the splits H200 sweeps
// measured fastest for one tile of rows (docs/cuda.md, "Choosing the split"), and for every
// shape a split the launcher takes, with the properties the rule promises for K, N ≤ 4096.
TEST(CudaStreamSplit, ChoosesTheMeasuredSplitsAndOnlyValidOnes) {
  auto chosen = [](int64_t K, int64_t N, int64_t M) {
    cuda::GemmArgs a;
    a.w.K = K;
    a.w.N = N;
    a.M = M;
    return cuda::choose_stream_config(a, 132);
  };
  struct Expected {
    int64_t K, N;
    int runs, cluster, blocks_per_sm;
  };
  for (const Expected& e :
       {Expected{2048, 2048, 1, 2, 1}, Expected{4096, 4096, 1, 2, 1}, Expected{1024, 4096, 1, 1, 1},
        Expected{4096, 1024, 1, 4, 1}, Expected{4096, 14336, 4, 4, 2}})
    for (int64_t M : {1, 4, 16}) {
      if (M <= 8 && e.K * e.N > 4096 * 4096) continue;  // decode on the large layers: below
      if (M > 8 && e.N <= 4096 * 2 && e.K >= 2048 && e.N >= 2048) continue;  // two tiles: below
      if (M > 8 && e.K >= 4096) continue;  // one 16-row tile with the weight as A: below
      const cuda::StreamConfig c = chosen(e.K, e.N, M);
      EXPECT_EQ(c.runs_per_block, e.runs) << e.K << "x" << e.N << " M" << M;
      EXPECT_EQ(c.cluster, e.cluster) << e.K << "x" << e.N << " M" << M;
      EXPECT_EQ(c.blocks_per_sm, e.blocks_per_sm) << e.K << "x" << e.N << " M" << M;
    }
  // Decode (up to 8 rows) on the large layers: one run per block (two where the runs exceed two
  // blocks per SM), clusters of at most two, one wave at one or two blocks per SM.
  for (const Expected& e : {Expected{4096, 14336, 1, 1, 2}, Expected{14336, 4096, 1, 2, 1},
                            Expected{8192, 8192, 1, 2, 2}, Expected{28672, 8192, 1, 2, 2},
                            Expected{8192, 28672, 2, 1, 2}, Expected{11008, 4096, 1, 2, 1}})
    for (int64_t M : {1, 4, 8}) {
      const cuda::StreamConfig c = chosen(e.K, e.N, M);
      EXPECT_EQ(c.runs_per_block, e.runs) << e.K << "x" << e.N << " M" << M;
      EXPECT_EQ(c.cluster, e.cluster) << e.K << "x" << e.N << " M" << M;
      EXPECT_EQ(c.blocks_per_sm, e.blocks_per_sm) << e.K << "x" << e.N << " M" << M;
      EXPECT_EQ(c.tile_rows, 8) << e.K << "x" << e.N << " M" << M;
    }
  // 9-16 rows with K from 4096 to 16384: one 16-row tile with the weight as A, one block per SM,
  // the fewest runs per block within the SMs, clusters of two where they fit.
  for (const Expected& e : {Expected{4096, 4096, 1, 2, 1}, Expected{14336, 4096, 1, 2, 1},
                            Expected{4096, 14336, 2, 1, 1}, Expected{8192, 8192, 1, 1, 1},
                            Expected{4096, 1024, 1, 2, 1}})
    for (int64_t M : {9, 12, 16}) {
      const cuda::StreamConfig c = chosen(e.K, e.N, M);
      EXPECT_EQ(c.tile_rows, 16) << e.K << "x" << e.N << " M" << M;
      EXPECT_EQ(c.weights_as_a, 1) << e.K << "x" << e.N << " M" << M;
      EXPECT_EQ(c.runs_per_block, e.runs) << e.K << "x" << e.N << " M" << M;
      EXPECT_EQ(c.cluster, e.cluster) << e.K << "x" << e.N << " M" << M;
      EXPECT_EQ(c.blocks_per_sm, e.blocks_per_sm) << e.K << "x" << e.N << " M" << M;
    }
  // Other 9-16 rows on layers of at most one run per SM: two tiles of 8, clusters of two, the
  // fewest runs per block within two blocks per SM.
  for (const Expected& e : {Expected{2048, 2048, 1, 2, 1}, Expected{28672, 8192, 2, 2, 2}})
    for (int64_t M : {9, 12, 16}) {
      const cuda::StreamConfig c = chosen(e.K, e.N, M);
      EXPECT_EQ(c.tile_rows, 8) << e.K << "x" << e.N << " M" << M;
      EXPECT_EQ(c.runs_per_block, e.runs) << e.K << "x" << e.N << " M" << M;
      EXPECT_EQ(c.cluster, e.cluster) << e.K << "x" << e.N << " M" << M;
      EXPECT_EQ(c.blocks_per_sm, e.blocks_per_sm) << e.K << "x" << e.N << " M" << M;
    }
  EXPECT_EQ(chosen(2048, 14336, 16).tile_rows, 16);     // 224 runs: the 16-row tile
  EXPECT_EQ(chosen(2048, 14336, 16).weights_as_a, -1);  // the rows as A, the launcher's default
  EXPECT_EQ(chosen(2048, 1024, 16).tile_rows, 16);      // 16 runs: too few blocks
  // The weight ring for decode tiles whose warps stream at least 16 slabs: at one block per SM
  // for every M, three batches from 48 slabs a warp and two below; at two blocks per SM two up to
  // 4 rows; two for 16-row tiles with the weight as A at one block per SM, none with the rows as
  // A.
  auto ring = [&](int64_t K, int64_t N, int64_t M) {
    cuda::GemmArgs a;
    a.w.K = K;
    a.w.N = N;
    a.M = M;
    return cuda::choose_weight_ring(a, chosen(K, N, M));
  };
  for (int64_t M : {1, 4, 8}) {
    EXPECT_EQ(ring(14336, 4096, M), 3) << M;               // one block per SM, 56 slabs per warp
    EXPECT_EQ(ring(4096, 4096, M), 2) << M;                // 16 slabs per warp
    EXPECT_EQ(ring(2048, 2048, M), 0) << M;                // 8 slabs per warp
    EXPECT_EQ(ring(4096, 14336, M), M <= 4 ? 2 : 0) << M;  // two blocks per SM
  }
  EXPECT_EQ(ring(4096, 14336, 2), 2);
  EXPECT_EQ(ring(14336, 4096, 16), 2);  // one 16-row tile with the weight as A
  EXPECT_EQ(ring(2048, 14336, 16), 0);  // the rows as A
  // MoE work items of 16 rows: four adjacent runs per block and the smallest cluster that leaves
  // a warp at most 64 slabs (8 warps, 2 per run).
  auto chosen_items = [](int64_t K, int64_t N, int64_t items) {
    cuda::GemmArgs a;
    a.w.K = K;
    a.w.N = N;
    a.M = items;
    a.items = reinterpret_cast<const int4*>(&a);  // not read: the count is on the device
    a.max_items = items;
    return cuda::choose_stream_config(a, 132);
  };
  for (int64_t items : {2, 8, 100}) {
    EXPECT_EQ(chosen_items(14336, 4096, items).runs_per_block, 4);
    EXPECT_EQ(chosen_items(14336, 4096, items).cluster, 8);  // 896 slabs: 56 per warp
    EXPECT_EQ(chosen_items(4096, 28672, items).cluster, 2);  // 256 slabs: 64 per warp
  }
  EXPECT_EQ(chosen_items(14336, 4096, 2).tile_rows, 16);  // items of up to 16 rows
  // Decode items (8 rows, the weight as A) split like one tile of a layer with runs × items runs:
  // Mixtral-like gate/up (448 runs, 2 items: 224 blocks) and down (64 runs: 256 blocks, both
  // blocks of every SM, 56 slabs per warp).
  auto decode_items = [](int64_t K, int64_t N, int64_t items) {
    cuda::GemmArgs a;
    a.w.K = K;
    a.w.N = N;
    a.items = reinterpret_cast<const int4*>(&a);
    a.max_items = items;
    a.item_rows = 8;
    return cuda::choose_stream_config(a, 132);
  };
  for (const auto& [K, N, R, C] :
       {std::array<int64_t, 4>{4096, 28672, 4, 1}, std::array<int64_t, 4>{14336, 4096, 4, 8}}) {
    const cuda::StreamConfig c = decode_items(K, N, 2);
    EXPECT_EQ(c.tile_rows, 8) << K << "x" << N;
    EXPECT_EQ(c.runs_per_block, R) << K << "x" << N;
    EXPECT_EQ(c.cluster, C) << K << "x" << N;
    cuda::GemmArgs a;
    a.w.K = K;
    a.w.N = N;
    a.items = reinterpret_cast<const int4*>(&a);
    a.max_items = 2;
    a.item_rows = 8;
    EXPECT_EQ(cuda::choose_weight_ring(a, c), 2) << K << "x" << N;  // 128 and 56 slabs a warp
    cuda::StreamConfig rows16 = c;  // items of 9-16 rows: 16-row tiles, which take no ring
    rows16.tile_rows = 16;
    EXPECT_EQ(cuda::choose_weight_ring(a, rows16), 0) << K << "x" << N;
    cuda::StreamConfig short_warps = c;  // 4 and 14 slabs a warp: registers
    short_warps.cluster = 8;
    short_warps.runs_per_block = 1;
    EXPECT_EQ(cuda::choose_weight_ring(a, short_warps), 0) << K << "x" << N;
  }
  EXPECT_EQ(decode_items(16, 64, 1).cluster, 1);  // too small for one wave: the fallback
  // M = 4 down projection (up to 9 items, more than one wave): four runs per block over a
  // cluster of 8, 56 slabs per warp.
  EXPECT_EQ(decode_items(14336, 4096, 9).runs_per_block, 4);
  EXPECT_EQ(decode_items(14336, 4096, 9).cluster, 8);
  // Experts of two runs (N = 128) and many items: no block takes more runs than there are.
  EXPECT_LE(decode_items(2048, 128, 63).runs_per_block, 2);
  // Every MoE item split is one the launcher takes.
  for (int64_t K : {16, 128, 768, 2048, 4096, 7168, 14336})
    for (int64_t N : {64, 128, 192, 1536, 4096, 28672})
      for (int32_t rows : {8, 16})
        for (int64_t n_items : {1, 2, 9, 100}) {
          cuda::GemmArgs a;
          a.w.K = K;
          a.w.N = N;
          a.items = reinterpret_cast<const int4*>(&a);
          a.max_items = n_items;
          a.item_rows = rows;
          const cuda::StreamConfig c = cuda::choose_stream_config(a, 132);
          const std::string at = std::to_string(K) + "x" + std::to_string(N) + " items " +
                                 std::to_string(n_items) + " of " + std::to_string(rows);
          EXPECT_TRUE(c.runs_per_block == 1 || c.runs_per_block == 2 || c.runs_per_block == 4)
              << at;
          EXPECT_LE(c.runs_per_block, std::max<int64_t>(1, N / 64)) << at;
          EXPECT_TRUE(c.cluster >= 1 && c.cluster <= 8) << at << ": cluster " << c.cluster;
          EXPECT_EQ(c.tile_rows, rows) << at;
        }
  for (int64_t K : {16, 128, 512, 1024, 2048, 4096, 4112, 8192, 14336})
    for (int64_t N : {64, 128, 1024, 4096, 4160, 14336})
      for (int64_t M : {1, 4, 16, 17, 300}) {
        const cuda::StreamConfig c = chosen(K, N, M);
        const std::string at =
            std::to_string(K) + "x" + std::to_string(N) + " M" + std::to_string(M);
        EXPECT_TRUE(c.runs_per_block == 1 || c.runs_per_block == 2 || c.runs_per_block == 4 ||
                    c.runs_per_block == 8)
            << at;
        EXPECT_TRUE(c.cluster >= 1 && c.cluster <= 8 && c.cluster != 5 && c.cluster != 7)
            << at << ": cluster " << c.cluster;
        EXPECT_TRUE(c.blocks_per_sm == 1 || c.blocks_per_sm == 2) << at;
        // The weight as A up to 8 rows, and for 9-16 rows in two tiles on layers of at most one
        // run per SM; 16 rows as A otherwise.
        if (M <= 8 || M > 16) {
          EXPECT_EQ(c.tile_rows, M <= 8 ? 8 : 16) << at;
        } else {
          EXPECT_TRUE(c.tile_rows == 8 || c.tile_rows == 16) << at;
          if (c.tile_rows == 8) {
            EXPECT_LE(N / 64, 132) << at << ": 8-row tiles on a wide layer";
          }
        }
        if (M <= 16 && K <= 4096 && N <= 4096) {
          const int64_t runs = N / 64, slabs = K / 16;
          EXPECT_EQ(c.runs_per_block, 1) << at;
          EXPECT_LE(runs * c.cluster, 132) << at << ": more blocks than SMs";
          if (c.cluster > 1) {
            EXPECT_GE(slabs / (8 * c.cluster), 8) << at << ": warps too short";
          }
        }
      }
}

// The large-M plan (host code, no GPU needed): where it starts, one share up to 256 MiB of
// dequantized weight, equal shares of whole runs within it beyond, shares forced by the caller
// rounded up to a run.
TEST(CudaDequantGemm, PlanKeepsTheScratchWithinItsCap) {
  cuda::GemmArgs a;
  a.M = 1024;
  for (const auto& [K, N] : std::vector<std::pair<int64_t, int64_t>>{
           {4096, 14336},
           {14336, 4096},
           {8192, 28672},
           {28672, 8192},
           {16384, 53248},
           {128, 64},
           {12288, 21824}}) {  // two shares of 10944 would pass the cap; three fit
    a.w.K = K;
    a.w.N = N;
    const cuda::DequantGemmPlan p = cuda::plan_dequant_gemm(a);
    const std::string at = std::to_string(K) + "x" + std::to_string(N);
    EXPECT_EQ(p.chunk_cols % 64, 0) << at;
    EXPECT_GT(p.chunk_cols, 0) << at;
    EXPECT_LE(p.weight_bytes, size_t(256) << 20) << at;
    EXPECT_GE(p.weight_bytes, size_t(2 * K * p.chunk_cols)) << at;
    EXPECT_EQ(p.sum_bytes, 0u) << at << ": no bias, no fp32 sums";
    if (2 * K * N <= (int64_t(256) << 20)) {
      EXPECT_EQ(p.chunk_cols, N) << at;
    }
    const int64_t shares = (N + p.chunk_cols - 1) / p.chunk_cols;
    const int64_t last = N - (shares - 1) * p.chunk_cols;
    EXPECT_GT(last + 64 * shares, p.chunk_cols) << at << ": the last share much smaller";
  }
  // Where the path starts: 49 rows from 4096 × 4096 up, 65 below.
  EXPECT_EQ(cuda::dequant_gemm_rows(4096, 4096), 49);
  EXPECT_EQ(cuda::dequant_gemm_rows(14336, 4096), 49);
  EXPECT_EQ(cuda::dequant_gemm_rows(2048, 2048), 65);
  a.w.K = 512;
  a.w.N = 640;
  EXPECT_EQ(cuda::plan_dequant_gemm(a, 100).chunk_cols, 128);
  EXPECT_EQ(cuda::plan_dequant_gemm(a, 5000).chunk_cols, 640);
  float bias = 0;
  a.bias = &bias;
  EXPECT_EQ(cuda::plan_dequant_gemm(a, 128).sum_bytes, size_t(1024 * 128 * 4));
  EXPECT_EQ(cuda::plan_dequant_gemm(a, 128).sum_rows, 1024);
  EXPECT_EQ(cuda::plan_dequant_gemm(a, 128, 100).sum_bytes, size_t(100 * 128 * 4));
  // With a bias, the fp32 sums of a long prefill stay within the cap too, in blocks of rows.
  a.M = 32768;
  a.w.K = 4096;
  a.w.N = 14336;
  const cuda::DequantGemmPlan p = cuda::plan_dequant_gemm(a);
  EXPECT_LE(p.sum_bytes, size_t(256) << 20);
  EXPECT_EQ(p.sum_bytes, size_t(p.sum_rows) * size_t(p.chunk_cols) * 4);
  EXPECT_GE(p.sum_rows, 4096) << "blocks of rows as large as the cap allows";
  EXPECT_LT(p.sum_rows, a.M);
}

// A 4096 × 14336 4-bit g128 layer's arguments with bf16 activations (no device memory: what the
// host-side rules read).
cuda::GemmArgs large_layer() {
  alignas(16) static const uint16_t x[8] = {};
  cuda::GemmArgs a;
  a.w.K = 4096;
  a.w.N = 14336;
  a.w.bits = 4;
  a.w.group_slabs = 8;
  a.x = x;
  a.ldx = 4096;
  return a;
}

// What the warpgroup-MMA kernel takes (a host check: no GPU needed): act-order, groups of 32,
// 8-bit weights, K not a multiple of 64, f32 activations, unaligned rows and MoE items go
// elsewhere.
TEST(CudaMarlinWgmma, TakesOnlyWhatItsLoopHandles) {
  cuda::GemmArgs a = large_layer();
  a.M = 1024;
  EXPECT_TRUE(cuda::wgmma_takes(a));
  auto refused = [&](const char* why, auto change) {
    cuda::GemmArgs b = a;
    change(b);
    EXPECT_FALSE(cuda::wgmma_takes(b)) << why;
    EXPECT_EQ(cuda::launch_marlin_wgmma(b, {}, nullptr), cudaErrorInvalidValue) << why;
  };
  refused("groups of 32", [](cuda::GemmArgs& b) { b.w.group_slabs = 2; });
  refused("act-order", [](cuda::GemmArgs& b) {
    b.w.group_slabs = 0;
    b.w.columns = static_cast<const int32_t*>(b.x);
  });
  refused("8-bit", [](cuda::GemmArgs& b) { b.w.bits = 8; });
  refused("K % 64", [](cuda::GemmArgs& b) { b.w.K = 4096 + 16; });
  refused("f32 activations", [](cuda::GemmArgs& b) { b.x_dtype = cuda::DType::f32; });
  refused("y of another dtype", [](cuda::GemmArgs& b) { b.y_dtype = cuda::DType::f16; });
  refused("row stride", [](cuda::GemmArgs& b) { b.ldx = 4100; });
  refused("a row stride past 2^22", [](cuda::GemmArgs& b) { b.ldx = (int64_t(1) << 22) + 8; });
  refused("unaligned x", [](cuda::GemmArgs& b) { b.x = static_cast<const uint16_t*>(b.x) + 1; });
  refused("MoE items", [](cuda::GemmArgs& b) { b.items = static_cast<const int4*>(b.x); });
  refused("the swiglu epilogue", [](cuda::GemmArgs& b) { b.epilogue = cuda::Epilogue::swiglu; });
  EXPECT_EQ(cuda::launch_marlin_wgmma(a, cuda::WgmmaConfig{5, false}, nullptr),
            cudaErrorInvalidValue)
      << "a cluster of 5";
  EXPECT_EQ(cuda::launch_marlin_wgmma(a, cuda::WgmmaConfig{1, false, 256}, nullptr),
            cudaErrorInvalidValue)
      << "256 rows with one fragment set";
  EXPECT_EQ(cuda::launch_marlin_wgmma(a, cuda::WgmmaConfig{1, true, 192}, nullptr),
            cudaErrorInvalidValue)
      << "192 rows";
  // The configuration on an H200-like fit (clusters of 4 fit 30 times at once, not 32): the
  // largest split whose blocks all fit, two fragment sets, never below 4 stages a rank; 256-row
  // blocks above 128 rows where they are estimated faster (long K) or alone fit; one set and two
  // blocks per SM only when even unsplit 128-row tiles outnumber the SMs.
  cuda::WgmmaFit fit;
  const int fits[5] = {0, 132, 66, 44, 30};
  std::copy(fits, fits + 5, fit.clusters);
  auto expect = [&](int64_t N, int64_t M, int rows, bool paired, int cluster, const char* why) {
    cuda::GemmArgs b = a;
    b.w.N = N;
    b.M = M;
    const cuda::WgmmaConfig c = cuda::choose_wgmma_config(b, fit);
    EXPECT_EQ(c.rows, rows) << why;
    EXPECT_EQ(c.paired, paired) << why;
    EXPECT_EQ(c.cluster, cluster) << why;
  };
  expect(14336, 1024, 256, true, 1, "448 tiles of 256 rows");
  expect(14336, 256, 256, true, 1, "112 tiles of 256 rows (224 of 128)");
  expect(14336, 200, 256, true, 1, "a partial 256-row tile");
  expect(14336, 128, 128, true, 1, "112 tiles");
  expect(32768, 128, 128, false, 1, "256 tiles of 128 rows");
  expect(8192, 64, 128, true, 2, "64 tiles");
  expect(4096, 64, 128, true, 3, "32 tiles: 32 clusters of 4 do not fit");
  expect(4096, 256, 128, true, 2, "64 tiles of 128 rows: split in two, they fit");
  expect(4096, 512, 256, true, 2, "128 tiles of 128 rows: 64 of 256");
  expect(2048, 64, 128, true, 4, "16 tiles");
  a.w.K = 14336;
  expect(4096, 256, 256, true, 3, "long K: 75 stages a rank of 256 rows beat 112 of 128");
  expect(4096, 64, 128, true, 3, "64 rows: 128-row blocks only");
  a.w.K = 512;
  expect(2048, 64, 128, true, 2, "8 stages");
}

// Which large-M kernel linear_marlin runs (a host check): from the dequantizing GEMM's row
// threshold, the warpgroup-MMA kernel up to 512 rows where the device has it and the kernel
// takes the weight, and up to 1024 where K is at least 4096 and its 256-row blocks fit the device
// at once (132 of them on an H200), dequantize-then-cuBLAS otherwise; f16 activations on neither
// when the dequantized weight leaves f16's range.
TEST(CudaMarlinDispatch, LargeMKernelByRowsDeviceAndWeight) {
  cuda::GemmArgs a = large_layer();
  using cuda::LargeM;
  cuda::WgmmaFit h200;
  h200.clusters[1] = 132;
  auto at = [&](int64_t M, bool wgmma = true, bool f16_fits = true) {
    cuda::GemmArgs b = a;
    b.M = M;
    return cuda::choose_large_m(b, wgmma ? &h200 : nullptr, f16_fits);
  };
  EXPECT_EQ(at(48), LargeM::none);
  EXPECT_EQ(at(49), LargeM::wgmma);
  EXPECT_EQ(at(512), LargeM::wgmma);
  ASSERT_GT((a.w.N + 127) / 128 * 3, 132) << "a layer too wide for one wave above 512 rows";
  EXPECT_EQ(at(513), LargeM::dequant_gemm);
  {
    // 4096×4096: 32 columns of blocks, so four rows of 256-row blocks (1024 rows) are one wave.
    const cuda::GemmArgs wide = a;
    a.w.N = 4096;
    EXPECT_EQ(at(1024), LargeM::wgmma);
    EXPECT_EQ(at(1025), LargeM::dequant_gemm) << "past 1024 rows";
    EXPECT_EQ(at(1024, false), LargeM::dequant_gemm);
    a.w.N = 8192;
    EXPECT_EQ(at(1024), LargeM::dequant_gemm) << "256 blocks for 132 places";
    a.w.N = 2048;
    a.w.K = a.ldx = 2048;
    EXPECT_EQ(at(1024), LargeM::dequant_gemm) << "one wave, but K too short";
    a = wide;
  }
  EXPECT_EQ(at(100, false), LargeM::dequant_gemm) << "no warpgroup MMA on the device";
  a.x_dtype = a.y_dtype = cuda::DType::f16;
  EXPECT_EQ(at(100), LargeM::wgmma);
  EXPECT_EQ(at(100, true, false), LargeM::none) << "dequantized weights past f16's range";
  a.x_dtype = a.y_dtype = cuda::DType::bf16;
  a.w.bits = 8;
  EXPECT_EQ(at(100), LargeM::dequant_gemm) << "8-bit";
  a.w.bits = 4;
  a.w.K = a.w.N = 2048;
  a.ldx = 2048;
  EXPECT_EQ(at(64), LargeM::none) << "a small layer keeps the small-M kernel to 64 rows";
  EXPECT_EQ(at(65), LargeM::wgmma);
}

}  // namespace
}  // namespace nibble::test
