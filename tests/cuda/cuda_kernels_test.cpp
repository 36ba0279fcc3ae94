// The CUDA kernels launched directly (no plugin glue): the Marlin small-M kernel in every split
// configuration and the general kernel, against the float64 reference on random weights and
// activations, outputs prefilled with NaN. Skipped, with the probe's reason, without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cuda_test_util.hpp"
#include "dequant_gemm.hpp"
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
           std::to_string(config.blocks_per_sm) + " T" + std::to_string(config.tile_rows) + " A" +
           std::to_string(config.weights_as_a) + " W" + std::to_string(config.weight_ring);
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

// The activations, outputs (dense, in the case's dtype) and bias of case c in a kernel's arguments.
template <class Args>
void set_io(Args& a, const LinearCase& c, void* x, void* y, const float* bias) {
  a.x = x;
  a.ldx = c.spec.K;
  a.x_dtype = dtype_of(c.act);
  a.y = y;
  a.ldy = c.spec.N;
  a.bias = bias;
  a.M = c.M;
}

// y = x·Wᵀ on the Marlin weight in `stack` for case c.
cuda::GemmArgs marlin_args(const LinearCase& c, const cuda::MarlinStack& stack, void* x, void* y,
                           const float* bias) {
  cuda::GemmArgs a;
  a.w = stack.view();
  set_io(a, c, x, y, bias);
  a.y_dtype = a.x_dtype;
  return a;
}

// The Marlin paths: the small-M streaming kernel (its split in c.config), the tiled one
// (config.cluster picks its split of K; 0: its own choice), the dequantizing GEMM
// (launch_marlin_dequant, then cuBLAS) in shares of `chunk_cols` outputs (0: its own plan), or
// the warpgroup-MMA kernel.
enum class MarlinPath { stream, tiled, dequant, wgmma };
void run_marlin_kernel(const LinearCase& c, MarlinPath path, int64_t chunk_cols = 0,
                       int64_t sum_rows = 0, cuda::WgmmaConfig wgmma = {}) {
  const CanonicalWeight w = random_weight(c.spec);
  const nibble_canonical_weight cw = w.view();
  const cuda::MarlinHost host = cuda::pack_marlin(sdk::QuantWeight(cw, "w"), false, "w");
  const cuda::MarlinStack stack(0, 1, host);
  const std::vector<float> bias = bias_f32(w);
  DeviceArray dbias(bias);
  cublasHandle_t handle = nullptr;
  if (path == MarlinPath::dequant) {
    ASSERT_EQ(cublasCreate(&handle), CUBLAS_STATUS_SUCCESS);
  }
  check_linear(c, w, [&](void* x, void* y) {
    const cuda::GemmArgs a =
        marlin_args(c, stack, x, y, bias.empty() ? nullptr : dbias.as<float>());
    if (path == MarlinPath::stream) {
      cuda_ok(cuda::launch_marlin_stream(a, c.config, nullptr), "launch_marlin_stream");
    } else if (path == MarlinPath::tiled) {
      ASSERT_TRUE(cuda::tiled_takes(a));
      const int cluster = c.config.cluster ? c.config.cluster : cuda::choose_tiled_cluster(a, 132);
      cuda_ok(cuda::launch_marlin_tiled(a, cluster, nullptr), "launch_marlin_tiled");
    } else if (path == MarlinPath::wgmma) {
      ASSERT_TRUE(cuda::wgmma_takes(a)) << c.label();
      cuda_ok(cuda::launch_marlin_wgmma(a, wgmma, nullptr), "launch_marlin_wgmma");
    } else {
      ASSERT_TRUE(cuda::dequant_gemm_takes(a));
      const cuda::DequantGemmPlan plan = cuda::plan_dequant_gemm(a, chunk_cols, sum_rows);
      DeviceArray scratch(plan.scratch_bytes());
      EXPECT_EQ(cuda::run_dequant_gemm(a, plan, handle, scratch.get(), nullptr), "");
      EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    }
  });
  if (handle) cublasDestroy(handle);
}

void run_marlin(const LinearCase& c) { run_marlin_kernel(c, MarlinPath::stream); }
void run_tiled(const LinearCase& c) { run_marlin_kernel(c, MarlinPath::tiled); }
void run_dequant_gemm_case(const LinearCase& c, int64_t chunk_cols, int64_t sum_rows = 0) {
  run_marlin_kernel(c, MarlinPath::dequant, chunk_cols, sum_rows);
}
void run_wgmma(const LinearCase& c, cuda::WgmmaConfig config = {}) {
  std::printf("  wgmma: cluster %d%s, %d rows%s\n", config.cluster, config.paired ? ", paired" : "",
              config.rows, config.tma ? ", TMA" : "");
  run_marlin_kernel(c, MarlinPath::wgmma, 0, 0, config);
}

void run_general(const LinearCase& c) {
  const CanonicalWeight w = random_weight(c.spec);
  const nibble_canonical_weight cw = w.view();
  const cuda::GeneralWeight gw(0, sdk::QuantWeight(cw, "w"));
  const std::vector<float> bias = bias_f32(w);
  DeviceArray dbias(bias);
  check_linear(c, w, [&](void* x, void* y) {
    cuda::GeneralArgs a;
    a.w = gw.view();
    set_io(a, c, x, y, bias.empty() ? nullptr : dbias.as<float>());
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

// The tile forms: 8 rows with the weight as A, 16 with the rows as A, 16 with the weight as A.
constexpr std::array<std::pair<int, int>, 3> kTileForms{{{8, 1}, {16, 0}, {16, 1}}};

cuda::StreamConfig split(int R, int C, int B, std::pair<int, int> form) {
  cuda::StreamConfig c{R, C, B, form.first};
  c.weights_as_a = form.second;
  return c;
}

// Every way of putting rows on the MMA on every case, whatever M: more rows than a tile run as
// further tiles.
TEST(CudaMarlinStream, RowsDtypesAndGroupings) {
  NIBBLE_REQUIRE_GPU();
  const DLDataType bf16 = sdk::dtype_bf16(), f16 = sdk::dtype_f16(), f32 = sdk::dtype_f32();
  for (auto form : kTileForms) {
    const cuda::StreamConfig c = split(0, 0, 2, form);
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
  for (auto form : kTileForms)
    for (int B : {2, 1})
      for (int R : {1, 2, 4, 8})
        for (int C : {1, 2, 3, 4, 6, 8}) {
          run_marlin({spec(1024, 512, 4, 128, false, false, sdk::dtype_f16(), 21), 5,
                      sdk::dtype_bf16(), split(R, C, B, form)});
          run_marlin({spec(1024, 320, 8, 64, true, false, sdk::dtype_bf16(), 22),
                      form.first == 8 ? 7 : 16, sdk::dtype_f16(), split(R, C, B, form)});
        }
  // Act-order groups (read per slab) and f32 activations under both register budgets.
  for (int B : {2, 1}) {
    run_marlin(
        {spec(1024, 128, 4, 64, true, true, sdk::dtype_f16(), 23), 3, sdk::dtype_f32(), {1, 3, B}});
    run_marlin({spec(1024, 128, 4, 64, true, true, sdk::dtype_f16(), 23),
                3,
                sdk::dtype_f32(),
                {1, 3, B, 16}});
    run_marlin({spec(1024, 128, 4, 64, true, true, sdk::dtype_f16(), 23), 14, sdk::dtype_f32(),
                split(1, 3, B, {16, 1})});
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
  // One block per strip: K is staged in several windows of shared memory (a window holds 143
  // slabs of 16 rows or of 8 f32 rows as two planes, 287 of 8 16-bit rows).
  run_marlin(
      {spec(4096, 256, 4, 128, true, false, sdk::dtype_f16(), 31), 16, sdk::dtype_bf16(), {1, 1}});
  run_marlin(
      {spec(4096, 128, 4, 128, false, false, sdk::dtype_f16(), 32), 3, sdk::dtype_f32(), {1, 1}});
  run_marlin({spec(8192, 256, 4, 64, false, false, sdk::dtype_bf16(), 34),
              6,
              sdk::dtype_bf16(),
              {1, 1, 2, 8}});
  run_marlin({spec(4096, 4096, 4, 128, true, false, sdk::dtype_f16(), 33), 16, sdk::dtype_bf16()});
}

TEST(CudaMarlinStream, WeightRing) {
  NIBBLE_REQUIRE_GPU();
  // Weight batches through a ring in shared memory, every depth, both register budgets and both
  // tiles; deep rings leave room for few staged input channels, so K takes several windows.
  const DLDataType bf16 = sdk::dtype_bf16(), f16 = sdk::dtype_f16(), f32 = sdk::dtype_f32();
  for (int W : {2, 3, 4, 6})
    for (int B : {2, 1}) {
      if (W == 6 && B == 2) continue;  // more than two blocks' share of an SM
      auto config = [&](int R, int C, int T, int weights_as_a = -1) {
        cuda::StreamConfig c{R, C, B, T};
        c.weights_as_a = weights_as_a;
        c.weight_ring = W;
        return c;
      };
      for (int64_t M : {1, 3, 8})
        run_marlin({spec(4096, 256, 4, 128, true, false, f16, 61), M, bf16, config(2, 1, 8)});
      run_marlin({spec(8192, 128, 4, 64, false, false, bf16, 62), 8, bf16, config(1, 3, 8)});
      run_marlin({spec(1024, 128, 8, 128, true, true, f16, 63), 5, f32, config(2, 2, 8)});
      run_marlin({spec(2048, 192, 4, -1, false, false, f32, 64), 2, f16, config(1, 4, 8)});
      for (int WA : {0, 1}) {
        run_marlin({spec(2048, 256, 4, 128, true, false, f16, 65), 16, bf16, config(4, 2, 16, WA)});
        run_marlin({spec(1024, 128, 8, 32, true, true, bf16, 66), 12, f32, config(1, 1, 16, WA)});
        run_marlin(
            {spec(4096, 128, 4, 128, false, false, bf16, 68), 13, f16, config(1, 2, 16, WA)});
      }
    }
  // A ring too deep for its staged rows is refused, not launched.
  const QuantSpec s = spec(1024, 128, 4, 128, true, false, sdk::dtype_f16(), 67);
  const CanonicalWeight w = random_weight(s);
  const nibble_canonical_weight cw = w.view();
  const cuda::MarlinStack stack(0, 1, cuda::pack_marlin(sdk::QuantWeight(cw, "w"), false, "w"));
  cuda::GemmArgs a;
  a.w = stack.view();
  a.M = 1;
  a.x_dtype = a.y_dtype = cuda::DType::bf16;
  cuda::StreamConfig deep{1, 1, 2, 8};
  deep.weight_ring = 6;
  EXPECT_EQ(cuda::launch_marlin_stream(a, deep, nullptr), cudaErrorInvalidValue);
  deep.weight_ring = 1;
  EXPECT_EQ(cuda::launch_marlin_stream(a, deep, nullptr), cudaErrorInvalidValue);
  // So is a tile form that does not exist: the rows as A in 8-row tiles, or an unknown operand.
  cuda::StreamConfig form{1, 1, 2, 8};
  form.weights_as_a = 0;
  EXPECT_EQ(cuda::launch_marlin_stream(a, form, nullptr), cudaErrorInvalidValue);
  form.tile_rows = 16;
  form.weights_as_a = 2;
  EXPECT_EQ(cuda::launch_marlin_stream(a, form, nullptr), cudaErrorInvalidValue);
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

// Every weight dequantized from the Marlin layout is (q − z)·s with the fp32 scale, rounded once
// to the output dtype, at its (output, input channel) — bit for bit, act-order included — and a
// share starting past output 0 writes its rows and, in each, nothing past K.
TEST(CudaMarlinDequant, EveryWeightIsTheRoundedProductAtItsPlace) {
  NIBBLE_REQUIRE_GPU();
  const DLDataType bf16 = sdk::dtype_bf16(), f16 = sdk::dtype_f16(), f32 = sdk::dtype_f32();
  const QuantSpec specs[] = {
      spec(256, 192, 4, 128, true, false, f16, 61), spec(512, 128, 4, 64, false, false, bf16, 62),
      spec(384, 64, 4, -1, false, false, f32, 63),  spec(512, 128, 4, 128, true, true, f16, 64),
      spec(256, 128, 8, 32, false, false, f16, 65), spec(512, 64, 8, 64, true, true, f32, 66),
      spec(384, 128, 8, -1, true, false, bf16, 67),
  };
  for (const QuantSpec& sp : specs)
    for (DLDataType out : {bf16, f16}) {
      const CanonicalWeight w = random_weight(sp);
      const nibble_canonical_weight cw = w.view();
      const cuda::MarlinHost host = cuda::pack_marlin(sdk::QuantWeight(cw, "w"), false, "w");
      const cuda::MarlinStack stack(0, 1, host);
      const int64_t n0 = w.N > 64 ? 64 : 0, n1 = w.N, ld = w.K + 16;
      const std::vector<uint16_t> sentinel(size_t((n1 - n0) * ld), uint16_t(0x7FC1));
      DeviceArray d(sentinel);
      cuda_ok(
          cuda::launch_marlin_dequant(stack.view(), n0, n1, dtype_of(out), d.get(), ld, nullptr),
          "launch_marlin_dequant");
      const std::vector<uint8_t> raw = d.download();
      const uint16_t* got = reinterpret_cast<const uint16_t*>(raw.data());
      size_t wrong = 0, touched_padding = 0;
      for (int64_t n = n0; n < n1; ++n) {
        for (int64_t k = 0; k < w.K; ++k) {
          const int64_t g = w.group_of(k);
          const float qz = float(int(w.q[size_t(n * w.K + k)]) - int(w.zeros[size_t(g * w.N + n)]));
          const float v = qz * float(w.scale(g, n));
          const uint16_t want = out.code == kDLBfloat ? sdk::f32_to_bf16(v) : sdk::f32_to_f16(v);
          const uint16_t have = got[size_t((n - n0) * ld + k)];
          if (have != want && wrong++ < 5)
            ADD_FAILURE() << sp.bits << "-bit g" << sp.group_size << " seed " << sp.seed << " out "
                          << sdk::dtype_name(out) << ": (n " << n << ", k " << k << ") holds 0x"
                          << std::hex << have << ", expected 0x" << want << std::dec;
        }
        for (int64_t k = w.K; k < ld; ++k)
          touched_padding += got[size_t((n - n0) * ld + k)] != 0x7FC1;
      }
      EXPECT_EQ(wrong, 0u) << "seed " << sp.seed;
      EXPECT_EQ(touched_padding, 0u) << "seed " << sp.seed << ": wrote past K";
    }
  // Shares that are not multiples of 64, or past N, are refused.
  const CanonicalWeight w = random_weight(spec(256, 128, 4, 128, true));
  const nibble_canonical_weight cw = w.view();
  const cuda::MarlinStack stack(0, 1, cuda::pack_marlin(sdk::QuantWeight(cw, "w"), false, "w"));
  EXPECT_EQ(
      cuda::launch_marlin_dequant(stack.view(), 32, 128, cuda::DType::bf16, nullptr, 256, nullptr),
      cudaErrorInvalidValue);
  EXPECT_EQ(
      cuda::launch_marlin_dequant(stack.view(), 0, 192, cuda::DType::bf16, nullptr, 256, nullptr),
      cudaErrorInvalidValue);
}

// The large-M path end to end against float64: shares of one run, of a few runs and the whole
// weight, with and without bias, 4- and 8-bit, act-order, f16 and bf16 activations.
TEST(CudaDequantGemm, SharesBiasesAndDtypes) {
  NIBBLE_REQUIRE_GPU();
  const DLDataType bf16 = sdk::dtype_bf16(), f16 = sdk::dtype_f16(), f32 = sdk::dtype_f32();
  for (DLDataType act : {bf16, f16})
    for (int64_t chunk : {0, 64, 192}) {
      run_dequant_gemm_case({spec(1024, 320, 4, 128, true, false, f16, 71), 65, act}, chunk);
      run_dequant_gemm_case({spec(512, 256, 4, 64, true, true, bf16, 72), 300, act}, chunk);
      run_dequant_gemm_case({spec(384, 128, 8, -1, false, false, f32, 73), 130, act}, chunk);
    }
  run_dequant_gemm_case({spec(4096, 1024, 4, 128, true, false, f16, 75), 1024, bf16}, 0);
  // Bias sums in blocks of 64 rows (the last one partial), over one share and over three.
  for (int64_t chunk : {0, 64})
    run_dequant_gemm_case({spec(1024, 192, 4, 128, false, false, bf16, 77), 300, bf16}, chunk, 64);
}

// The warpgroup-MMA kernel against float64: 4-bit weights of every scale dtype and grouping it
// takes, symmetric and with zero points, with and without bias, row counts that fill or leave
// part of a 128-row tile, an odd number of 64-wide runs (a block's second run empty), f16 and
// bf16 activations; and the shapes it refuses.
TEST(CudaMarlinWgmma, RowsDtypesGroupingsAndTails) {
  NIBBLE_REQUIRE_GPU();
  if (!cuda::wgmma_available()) GTEST_SKIP() << "the device is not compute capability 9.0";
  const DLDataType bf16 = sdk::dtype_bf16(), f16 = sdk::dtype_f16(), f32 = sdk::dtype_f32();
  for (DLDataType act : {bf16, f16}) {
    for (int64_t M : {1, 77, 128, 300})
      run_wgmma({spec(1024, 320, 4, 128, true, false, f16, 81), M, act});
    run_wgmma({spec(512, 256, 4, 64, false, false, bf16, 82), 200, act});
    run_wgmma({spec(768, 192, 4, -1, true, false, f32, 83), 129, act});
    run_wgmma({spec(4096, 1024, 4, 128, false, false, f16, 84), 1024, act});
  }
  // Both fragment schemes and both block heights at every split of K (the ranks' stages uneven
  // where 4 does not divide them; 2 stages for the 128-input case, so a rank may have none), with
  // and without bias, and rows over more than one block of either height.
  for (int rows : {128, 256})
    for (bool paired : {false, true})
      for (int C : {1, 2, 3, 4})
        for (bool tma : {false, true}) {
          if ((rows == 256 && !paired) || (tma && !paired)) continue;
          const cuda::WgmmaConfig config{C, paired, rows, tma};
          run_wgmma({spec(1280, 320, 4, 128, true, false, f16, 85), 200, bf16}, config);
          run_wgmma({spec(128, 128, 4, 64, false, false, bf16, 86), 77, f16}, config);
          run_wgmma({spec(1024, 256, 4, 128, false, false, bf16, 87), 600, f16}, config);
        }
}

// Every weight the warpgroup-MMA kernel multiplies is (q − z)·s rounded once to x's dtype (with an
// fp32 scale, the product rounded to fp32 first): with one-hot activation rows (row m is input m)
// each output is one weight times 1, exact in the fp32 sums, so y holds the weights bit for bit
// (zeros of either sign compare equal). Every scale dtype, with and without zero points, three
// groupings, both block heights.
TEST(CudaMarlinWgmma, DequantizesEveryWeightRoundedOnce) {
  NIBBLE_REQUIRE_GPU();
  if (!cuda::wgmma_available()) GTEST_SKIP() << "the device is not compute capability 9.0";
  const DLDataType bf16 = sdk::dtype_bf16(), f16 = sdk::dtype_f16(), f32 = sdk::dtype_f32();
  constexpr int64_t K = 256, N = 192;  // three 64-wide runs: a block's second run is empty
  uint32_t seed = 90;
  for (DLDataType act : {bf16, f16})
    for (DLDataType scales : {f16, bf16, f32})
      for (bool sym : {true, false})
        for (int gs : {64, 128, -1})
          for (const cuda::WgmmaConfig config :
               {cuda::WgmmaConfig{}, cuda::WgmmaConfig{2, true, 256, false},
                cuda::WgmmaConfig{2, true, 256, true}, cuda::WgmmaConfig{1, true, 128, true}}) {
            const LinearCase c{spec(K, N, 4, gs, sym, false, scales, seed += 2), K, act};
            const CanonicalWeight w = random_weight(c.spec);
            const cuda::MarlinStack stack(
                0, 1, cuda::pack_marlin(sdk::QuantWeight(w.view(), "w"), false, "w"));
            std::vector<uint16_t> x(size_t(K * K), 0);
            const uint16_t one = act.code == kDLBfloat ? 0x3F80 : 0x3C00;
            for (int64_t m = 0; m < K; ++m) x[size_t(m * K + m)] = one;
            std::vector<uint8_t> y_host(size_t(K * N) * 2);
            poison(y_host, act);
            DeviceArray dx(x), dy(y_host);
            cuda_ok(cuda::launch_marlin_wgmma(marlin_args(c, stack, dx.get(), dy.get(), nullptr),
                                              config, nullptr),
                    "launch_marlin_wgmma");
            const std::vector<uint8_t> y = dy.download();
            int64_t wrong = 0;
            char first[96] = "";
            for (int64_t m = 0; m < K; ++m)
              for (int64_t n = 0; n < N; ++n) {
                const float v = float(w.dequant(n, m));
                const uint16_t want =
                    act.code == kDLBfloat ? sdk::f32_to_bf16(v) : sdk::f32_to_f16(v);
                uint16_t got = 0;
                std::memcpy(&got, y.data() + size_t(m * N + n) * 2, 2);
                const bool zeros = ((want | got) & 0x7FFF) == 0;
                if (got != want && !zeros && wrong++ == 0)
                  std::snprintf(first, sizeof first,
                                "input %lld output %lld: got 0x%04x, want 0x%04x",
                                static_cast<long long>(m), static_cast<long long>(n), got, want);
              }
            EXPECT_EQ(wrong, 0) << c.label() << " rows " << config.rows << " C" << config.cluster
                                << (config.tma ? " TMA" : "") << ": first " << first;
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
