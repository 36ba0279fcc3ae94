// The CUDA kernels launched directly (no plugin glue): the Marlin small-M kernel in every split
// configuration and the general kernel, against the float64 reference on random weights and
// activations, outputs prefilled with NaN. Skipped, with the probe's reason, without a GPU.
#include <gtest/gtest.h>

#include <array>
#include <string>
#include <vector>

#include "cuda_test_util.hpp"
#include "general_weight.hpp"
#include "marlin_weight.hpp"

namespace nibble::test {
namespace {

struct LinearCase {
  QuantSpec spec;
  int64_t M = 1;
  DLDataType act = sdk::dtype_bf16();
  cuda::StreamConfig config{};
  std::string label() const {
    return "K" + std::to_string(spec.K) + " N" + std::to_string(spec.N) + " " +
           std::to_string(spec.bits) + "-bit g" + std::to_string(spec.group_size) +
           (spec.symmetric ? " sym" : " asym") + (spec.act_order ? " act-order" : "") +
           (spec.v1_zero16 ? " zero16" : "") + " scales " + sdk::dtype_name(spec.scales_dtype) +
           " x " + sdk::dtype_name(act) + " M" + std::to_string(M) + " R" +
           std::to_string(config.runs_per_block) + " C" + std::to_string(config.cluster) + " B" +
           std::to_string(config.blocks_per_sm) + " T" + std::to_string(config.tile_rows);
  }
};

// Runs `launch(x, y)` for a case and checks y against the float64 reference.
template <class Launch>
void check_linear(const LinearCase& c, const CanonicalWeight& w, const Launch& launch) {
  const Activations x = random_activations(c.M, c.spec.K, c.act, c.spec.seed + 7);
  DeviceArray dx(x.bytes);
  std::vector<uint8_t> y_host(size_t(c.M * c.spec.N) * sdk::dtype_bytes(c.act));
  poison(y_host, c.act);
  DeviceArray dy(y_host);
  launch(dx.get(), dy.get());
  cuda_ok(cudaGetLastError(), "launch");
  cuda_ok(cudaDeviceSynchronize(), "kernel");
  size_t non_finite = 0;
  const std::vector<double> y =
      read_output(dy.download(), c.act, y_host.size() / sdk::dtype_bytes(c.act), &non_finite);
  EXPECT_EQ(non_finite, 0u) << c.label() << ": outputs left unwritten or not finite";
  const double err = relative_error(y, reference_linear(w, x.values, c.M));
  EXPECT_LE(err, bound_for(c.act)) << c.label();
  ::testing::Test::RecordProperty(c.label(), std::to_string(err));
  std::printf("  %-90s rel err %.3g\n", c.label().c_str(), err);
}

// One of the two Marlin kernels on case c: the small-M streaming kernel (its split in
// c.config), or the tiled one (config.cluster picks its split of K; 0: its own choice).
void run_marlin_kernel(const LinearCase& c, bool tiled) {
  const CanonicalWeight w = random_weight(c.spec);
  const nibble_canonical_weight cw = w.view();
  const cuda::MarlinHost host = cuda::pack_marlin(sdk::QuantWeight(cw, "w"), false, "w");
  const cuda::MarlinStack stack(0, 1, host);
  const std::vector<float> bias = bias_f32(w);
  DeviceArray dbias(bias);
  check_linear(c, w, [&](void* x, void* y) {
    cuda::GemmArgs a;
    a.w = stack.view();
    a.x = x;
    a.ldx = c.spec.K;
    a.x_dtype = dtype_of(c.act);
    a.y = y;
    a.ldy = c.spec.N;
    a.y_dtype = dtype_of(c.act);
    a.bias = bias.empty() ? nullptr : dbias.as<float>();
    a.M = c.M;
    if (!tiled) {
      cuda_ok(cuda::launch_marlin_stream(a, c.config, nullptr), "launch_marlin_stream");
      return;
    }
    ASSERT_TRUE(cuda::tiled_takes(a));
    const int cluster = c.config.cluster ? c.config.cluster : cuda::choose_tiled_cluster(a, 132);
    cuda_ok(cuda::launch_marlin_tiled(a, cluster, nullptr), "launch_marlin_tiled");
  });
}

void run_marlin(const LinearCase& c) { run_marlin_kernel(c, false); }
void run_tiled(const LinearCase& c) { run_marlin_kernel(c, true); }

void run_general(const LinearCase& c) {
  const CanonicalWeight w = random_weight(c.spec);
  const nibble_canonical_weight cw = w.view();
  const cuda::GeneralWeight gw(0, sdk::QuantWeight(cw, "w"));
  const std::vector<float> bias = bias_f32(w);
  DeviceArray dbias(bias);
  check_linear(c, w, [&](void* x, void* y) {
    cuda::GeneralArgs a;
    a.w = gw.view();
    a.x = x;
    a.ldx = c.spec.K;
    a.x_dtype = dtype_of(c.act);
    a.y = y;
    a.ldy = c.spec.N;
    a.bias = bias.empty() ? nullptr : dbias.as<float>();
    a.M = c.M;
    cuda_ok(cuda::launch_general(a, nullptr), "launch_general");
  });
}

QuantSpec spec(int64_t K, int64_t N, int bits, int gs, bool sym, bool act_order = false,
               DLDataType scales = sdk::dtype_f16(), uint32_t seed = 1) {
  QuantSpec s;
  s.K = K;
  s.N = N;
  s.bits = bits;
  s.group_size = gs;
  s.symmetric = sym;
  s.act_order = act_order;
  s.bias = seed % 2 == 1;
  s.scales_dtype = scales;
  s.seed = seed;
  return s;
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
  for (const Expected& e : {Expected{2048, 2048, 1, 2, 1}, Expected{4096, 4096, 1, 2, 1},
                            Expected{1024, 4096, 1, 1, 1}, Expected{4096, 1024, 1, 4, 1},
                            Expected{4096, 14336, 4, 4, 2}, Expected{14336, 4096, 4, 8, 2}})
    for (int64_t M : {1, 4, 16}) {
      if (M <= 8 && e.K * e.N > 4096 * 4096) continue;  // decode on the large layers: below
      const cuda::StreamConfig c = chosen(e.K, e.N, M);
      EXPECT_EQ(c.runs_per_block, e.runs) << e.K << "x" << e.N << " M" << M;
      EXPECT_EQ(c.cluster, e.cluster) << e.K << "x" << e.N << " M" << M;
      EXPECT_EQ(c.blocks_per_sm, e.blocks_per_sm) << e.K << "x" << e.N << " M" << M;
    }
  // Decode (up to 8 rows) on the large layers: two runs per block, 1.4-1.75 blocks per SM.
  for (const Expected& e : {Expected{4096, 14336, 2, 2, 2}, Expected{14336, 4096, 2, 6, 2}})
    for (int64_t M : {1, 4, 8}) {
      const cuda::StreamConfig c = chosen(e.K, e.N, M);
      EXPECT_EQ(c.runs_per_block, e.runs) << e.K << "x" << e.N << " M" << M;
      EXPECT_EQ(c.cluster, e.cluster) << e.K << "x" << e.N << " M" << M;
      EXPECT_EQ(c.blocks_per_sm, e.blocks_per_sm) << e.K << "x" << e.N << " M" << M;
    }
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
        EXPECT_EQ(c.tile_rows, M <= 8 ? 8 : 16) << at;  // the weight as A up to 8 rows
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

// Both ways of putting rows on the MMA (tiles of 8 rows with the weight as A, tiles of 16 with
// the rows as A) on every case, whatever M: more rows than a tile run as further tiles.
TEST(CudaMarlinStream, RowsDtypesAndGroupings) {
  NIBBLE_REQUIRE_GPU();
  const DLDataType bf16 = sdk::dtype_bf16(), f16 = sdk::dtype_f16(), f32 = sdk::dtype_f32();
  for (int T : {8, 16}) {
    const cuda::StreamConfig c{0, 0, 2, T};
    for (int64_t M : {1, 3, 8, 9, 16, 64, 300})
      run_marlin({spec(512, 256, 4, 128, true, false, f16, 1), M, bf16, c});
    for (DLDataType act : {bf16, f16, f32}) {
      run_marlin({spec(512, 192, 4, 128, false, false, f16, 2), 3, act, c});  // AWQ-style zeros
      run_marlin({spec(384, 128, 4, -1, true, false, bf16, 3), 16, act, c});  // per channel
      run_marlin({spec(384, 128, 4, -1, false, false, f32, 4), 5, act, c});   // per channel, zeros
      run_marlin({spec(384, 128, 4, -1, true, false, f16, 12), 1, act, c});   // per channel, M 1
      run_marlin({spec(256, 64, 4, 32, false, false, f16, 5), 7, act, c});
      run_marlin({spec(512, 128, 4, 64, true, false, bf16, 6), 16, act, c});
      run_marlin({spec(1024, 128, 4, 128, true, true, f16, 7), 9, act, c});    // act-order
      run_marlin({spec(1024, 128, 4, 128, true, true, bf16, 13), 2, act, c});  // act-order
      run_marlin({spec(512, 128, 8, 128, true, false, f16, 8), 4, act, c});    // uint8b128
      run_marlin({spec(512, 128, 8, -1, false, false, f16, 9), 2, act, c});    // uint8 zeros
      run_marlin({spec(256, 64, 8, 32, false, false, bf16, 10), 17, act, c});
      run_marlin({spec(512, 128, 8, 64, true, true, f32, 11), 3, act, c});  // 8-bit act-order
    }
  }
}

TEST(CudaMarlinStream, EverySplitConfiguration) {
  NIBBLE_REQUIRE_GPU();
  for (int T : {8, 16})
    for (int B : {2, 1})
      for (int R : {1, 2, 4, 8})
        for (int C : {1, 2, 3, 4, 6, 8}) {
          run_marlin({spec(1024, 512, 4, 128, false, false, sdk::dtype_f16(), 21),
                      5,
                      sdk::dtype_bf16(),
                      {R, C, B, T}});
          run_marlin({spec(1024, 320, 8, 64, true, false, sdk::dtype_bf16(), 22),
                      T == 8 ? 7 : 16,
                      sdk::dtype_f16(),
                      {R, C, B, T}});
        }
  // Act-order groups (read per slab) and f32 activations under both register budgets.
  for (int B : {2, 1}) {
    run_marlin(
        {spec(1024, 128, 4, 64, true, true, sdk::dtype_f16(), 23), 3, sdk::dtype_f32(), {1, 3, B}});
    run_marlin({spec(1024, 128, 4, 64, true, true, sdk::dtype_f16(), 23),
                3,
                sdk::dtype_f32(),
                {1, 3, B, 16}});
    run_marlin({spec(2048, 192, 4, 32, false, false, sdk::dtype_bf16(), 24),
                11,
                sdk::dtype_bf16(),
                {2, 4, B}});
  }
}

// Two layers back to back on one stream, the first's output the second's input: launched with
// programmatic stream serialization the second starts while the first runs and must still read
// the first's output, not the NaN it overwrote. Its bytes equal those of the same chain with the
// device waited for between the layers.
TEST(CudaMarlinStream, AChainedLayerReadsItsInputAfterThePreviousKernel) {
  NIBBLE_REQUIRE_GPU();
  const DLDataType bf16 = sdk::dtype_bf16();
  const QuantSpec s1 = spec(4096, 1024, 4, 128, true, false, sdk::dtype_f16(), 41),
                  s2 = spec(1024, 512, 4, 128, true, false, sdk::dtype_f16(), 42);
  const CanonicalWeight w1 = random_weight(s1), w2 = random_weight(s2);
  const nibble_canonical_weight c1 = w1.view(), c2 = w2.view();
  const cuda::MarlinStack l1(0, 1, cuda::pack_marlin(sdk::QuantWeight(c1, "w1"), false, "w1"));
  const cuda::MarlinStack l2(0, 1, cuda::pack_marlin(sdk::QuantWeight(c2, "w2"), false, "w2"));
  for (int64_t M : {1, 5}) {
    const Activations x = random_activations(M, s1.K, bf16, 43);
    DeviceArray dx(x.bytes);
    std::vector<uint8_t> nan_h(size_t(M * s1.N) * 2), nan_y(size_t(M * s2.N) * 2);
    poison(nan_h, bf16);
    poison(nan_y, bf16);
    DeviceArray dh(nan_h), dy(nan_y);
    auto args = [&](const cuda::MarlinStack& l, const void* in, int64_t K, void* out, int64_t N) {
      cuda::GemmArgs a;
      a.w = l.view();
      a.x = in;
      a.ldx = K;
      a.x_dtype = cuda::DType::bf16;
      a.y = out;
      a.ldy = N;
      a.y_dtype = cuda::DType::bf16;
      a.M = M;
      return a;
    };
    const cuda::GemmArgs a1 = args(l1, dx.get(), s1.K, dh.get(), s1.N),
                         a2 = args(l2, dh.get(), s2.K, dy.get(), s2.N);
    cudaStream_t stream = nullptr;
    cuda_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    auto chain = [&](bool wait_between) {
      cuda_ok(cudaMemcpy(dh.get(), nan_h.data(), nan_h.size(), cudaMemcpyHostToDevice), "poison");
      cuda_ok(cudaMemcpy(dy.get(), nan_y.data(), nan_y.size(), cudaMemcpyHostToDevice), "poison");
      cuda_ok(cuda::launch_marlin_stream(a1, {}, stream), "layer 1");
      if (wait_between) cuda_ok(cudaStreamSynchronize(stream), "between the layers");
      cuda_ok(cuda::launch_marlin_stream(a2, {}, stream), "layer 2");
      cuda_ok(cudaStreamSynchronize(stream), "after the chain");
      return dy.download();
    };
    const std::vector<uint8_t> apart = chain(true);
    size_t non_finite = 0;
    read_output(apart, bf16, size_t(M * s2.N), &non_finite);
    EXPECT_EQ(non_finite, 0u) << "M" << M;
    for (int round = 0; round < 20; ++round)
      ASSERT_EQ(chain(false), apart) << "M" << M << ", round " << round;
    cudaStreamDestroy(stream);
  }
}

TEST(CudaMarlinStream, WindowsOfK) {
  NIBBLE_REQUIRE_GPU();
  // One block per strip: K is staged in several windows of shared memory.
  run_marlin(
      {spec(4096, 256, 4, 128, true, false, sdk::dtype_f16(), 31), 16, sdk::dtype_bf16(), {1, 1}});
  run_marlin(
      {spec(4096, 128, 4, 128, false, false, sdk::dtype_f16(), 32), 3, sdk::dtype_f32(), {1, 1}});
  run_marlin({spec(4096, 256, 4, 64, false, false, sdk::dtype_bf16(), 34),
              6,
              sdk::dtype_bf16(),
              {1, 1, 2, 8}});
  run_marlin({spec(4096, 4096, 4, 128, true, false, sdk::dtype_f16(), 33), 16, sdk::dtype_bf16()});
}

TEST(CudaMarlinTiled, RowsDtypesGroupingsAndSplits) {
  NIBBLE_REQUIRE_GPU();
  const DLDataType bf16 = sdk::dtype_bf16(), f16 = sdk::dtype_f16(), f32 = sdk::dtype_f32();
  for (int64_t M : {1, 65, 128, 300, 1024})
    run_tiled({spec(1024, 256, 4, 128, true, false, f16, 51), M, bf16});
  for (DLDataType act : {bf16, f16}) {
    run_tiled({spec(512, 192, 4, 128, false, false, f16, 52), 130, act});  // N % 128 == 64
    run_tiled({spec(384, 128, 4, -1, true, false, bf16, 53), 77, act});
    run_tiled({spec(384, 256, 4, -1, false, false, f32, 54), 200, act});
    run_tiled({spec(256, 128, 4, 32, false, false, f16, 55), 129, act});
    run_tiled({spec(512, 128, 8, 128, true, false, f16, 56), 140, act});
    run_tiled({spec(512, 128, 8, 64, false, false, bf16, 57), 257, act});
  }
  for (int C : {1, 2, 3, 4}) {
    run_tiled({spec(2048, 384, 4, 128, false, false, f16, 58), 150, bf16, {1, C}});
    run_tiled({spec(1024, 128, 8, -1, true, false, bf16, 59), 64, f16, {1, C}});
  }
}

TEST(CudaGeneral, AnyGroupingZeroAndWidth) {
  NIBBLE_REQUIRE_GPU();
  const DLDataType bf16 = sdk::dtype_bf16(), f16 = sdk::dtype_f16(), f32 = sdk::dtype_f32();
  for (DLDataType act : {bf16, f16, f32}) {
    run_general({spec(300, 37, 4, 48, false, false, f16, 41), 3, act});    // odd group, K, N
    run_general({spec(512, 96, 4, 128, false, true, bf16, 42), 16, act});  // act-order + zeros
    run_general({spec(200, 64, 8, 40, false, true, f32, 43), 5, act});     // 8-bit act-order
    run_general({spec(256, 33, 8, -1, true, false, f16, 44), 1, act});
    QuantSpec v1 = spec(256, 64, 4, 64, false, false, f16, 45);
    v1.v1_zero16 = true;  // GPTQ v1: zero points 1..16
    run_general({v1, 9, act});
  }
  for (int64_t M : {1, 16, 64, 300})
    run_general({spec(1000, 130, 4, 100, false, true, f16, 46), M, bf16});
}

}  // namespace
}  // namespace nibble::test
