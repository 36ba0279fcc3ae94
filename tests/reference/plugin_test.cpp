// What the reference plugins say about themselves (names, probe, kernels, priorities, bounds),
// the refusals that depend only on the layer descriptor, and the dense kernels.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "kernel_runs.hpp"

namespace nibble::test {
namespace {

nibble_probe_result probe(const HarnessPlugin& p) {
  nibble_probe_result r{};
  r.struct_size = sizeof r;
  EXPECT_EQ(p.plugin().probe(&r), NIBBLE_OK);
  return r;
}

TEST(ReferencePlugins, DescribeThemselvesAndAreAvailableEverywhere) {
  const std::map<std::string, std::map<std::string, int>> expected = {
      {"npu_ref", {{"linear_antiquant", 10}, {"dense", 10}, {"moe_antiquant", 10}}},
      {"gpu_ref",
       {{"linear_marlin", 20},
        {"linear_exllama", 15},
        {"dense", 15},
        {"moe_marlin", 20},
        {"moe_exllama", 15}}}};
  for (const auto& [name, kernels] : expected) {
    HarnessPlugin p(name);
    EXPECT_EQ(std::string(p.plugin().name), name);
    EXPECT_EQ(p.plugin().abi_major, NIBBLE_ABI_MAJOR);
    const nibble_probe_result r = probe(p);
    EXPECT_EQ(r.available, 1) << name;
    EXPECT_NE(std::string(r.detail).find("available on every host"), std::string::npos) << r.detail;
    ASSERT_EQ(p.plugin().kernel_count, kernels.size()) << name;
    for (const auto& [kernel, priority] : kernels) {
      const nibble_kernel* k = p.kernel(kernel);
      ASSERT_NE(k, nullptr) << name << "/" << kernel;
      EXPECT_EQ(k->priority, priority) << kernel;
      EXPECT_LT(k->priority, 100) << "cpu_amx must win under auto";
      EXPECT_EQ(k->error_bound_f32, 1e-5) << kernel;
      EXPECT_EQ(k->error_bound_f16, 5e-4) << kernel;
      EXPECT_EQ(k->error_bound_bf16, 4e-3) << kernel;
      EXPECT_EQ(k->numeric_mode, k->op == NIBBLE_OP_DENSE ? NIBBLE_MODE_FLOAT : NIBBLE_MODE_W4A16);
    }
  }
}

// A linear descriptor of any shape (the weight behind it is never prepared).
nibble_layer_desc shaped_desc(int64_t K, int64_t N, int bits, int gs) {
  nibble_layer_desc d = linear_desc(random_weight(QuantSpec{8, 8, 4, -1}));
  d.K = K;
  d.N = N;
  d.bits = bits;
  d.group_size = gs;
  return d;
}

TEST(ReferencePlugins, DescriptorRefusalsNameTheRule) {
  HarnessPlugin npu("npu_ref"), gpu("gpu_ref");
  const nibble_kernel* antiquant = npu.kernel("linear_antiquant");
  const nibble_kernel* marlin = gpu.kernel("linear_marlin");
  const nibble_kernel* exllama = gpu.kernel("linear_exllama");

  nibble_layer_desc d = shaped_desc(256, 128, 4, 256);  // group 256: not a Marlin group size
  EXPECT_NE(why_not(marlin, d).find("Marlin supports -1, 32, 64 and 128"), std::string::npos);
  EXPECT_EQ(why_not(exllama, d), "");
  EXPECT_EQ(why_not(antiquant, d), "");

  d = shaped_desc(256, 96, 4, 128);
  EXPECT_NE(why_not(marlin, d).find("N = 96 is not a multiple of 64"), std::string::npos);
  d = shaped_desc(192, 128, 4, 64);
  EXPECT_NE(why_not(marlin, d).find("K = 192 is not a multiple of 128"), std::string::npos);

  d = shaped_desc(256, 128, 3, 128);
  for (const nibble_kernel* k : {antiquant, marlin, exllama})
    EXPECT_NE(why_not(k, d).find("3-bit"), std::string::npos) << k->name;

  d = shaped_desc(256, 128, 4, 128);
  d.numeric_mode = NIBBLE_MODE_W4A8;
  for (const nibble_kernel* k : {antiquant, marlin, exllama})
    EXPECT_NE(why_not(k, d).find("w4a8"), std::string::npos) << k->name;

  d = shaped_desc(256, 128, 4, 128);
  d.op = NIBBLE_OP_MOE;
  EXPECT_NE(why_not(antiquant, d), "");
  d.num_experts = 4;
  d.top_k = 2;
  d.activation = 7;
  d.w2_group_size = 128;
  EXPECT_NE(why_not(npu.kernel("moe_antiquant"), d).find("silu"), std::string::npos);
  EXPECT_NE(why_not(gpu.kernel("moe_exllama"), d).find("silu"), std::string::npos);
}

// Dense weights in f32, f16 and bf16, with bias, against float64.
TEST(ReferencePlugins, DenseKernelsMatchFloat64) {
  HarnessPlugin npu("npu_ref"), gpu("gpu_ref");
  const int64_t K = 200, N = 72;
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.f, 0.05f);
  for (DLDataType wd : {sdk::dtype_f32(), sdk::dtype_f16(), sdk::dtype_bf16()}) {
    std::vector<uint8_t> weight(size_t(K * N) * sdk::dtype_bytes(wd));
    std::vector<float> bias(static_cast<size_t>(N));
    std::vector<double> wv(size_t(K * N));
    for (size_t i = 0; i < wv.size(); ++i) {
      sdk::store_float(weight.data(), wd, i, nd(rng));
      wv[i] = sdk::load_float(weight.data(), wd, i);
    }
    for (auto& b : bias) b = nd(rng);
    nibble_dense_weight dw{};
    dw.struct_size = sizeof dw;
    dw.K = K;
    dw.N = N;
    dw.data = weight.data();
    dw.dtype = wd;
    dw.bias = bias.data();
    dw.bias_dtype = sdk::dtype_f32();
    nibble_layer_desc d{};
    d.struct_size = sizeof d;
    d.op = NIBBLE_OP_DENSE;
    d.name = "router";
    d.K = K;
    d.N = N;
    d.has_bias = 1;
    d.weight_dtype = wd;
    d.numeric_mode = NIBBLE_MODE_FLOAT;
    d.act_dtypes = NIBBLE_DTYPE_F32 | NIBBLE_DTYPE_F16 | NIBBLE_DTYPE_BF16;
    for (const nibble_kernel* k : {npu.kernel("dense"), gpu.kernel("dense")}) {
      ASSERT_EQ(why_not(k, d), "");
      const nibble_weight_input in = sdk::host::dense_input(dw);
      PreparedLayer layer(sdk::host::prepare(k, d, in));  // throws with the plugin's message
      for (int64_t M : {1, 33})
        for (DLDataType dt : {sdk::dtype_f32(), sdk::dtype_bf16(), sdk::dtype_f16()}) {
          const Activations x = random_activations(M, K, dt, uint32_t(M) + 5);
          std::vector<double> ref(size_t(M * N));
          for (int64_t m = 0; m < M; ++m)
            for (int64_t n = 0; n < N; ++n) {
              double acc = bias[size_t(n)];
              for (int64_t kk = 0; kk < K; ++kk)
                acc += x.values[size_t(m * K + kk)] * wv[size_t(n * K + kk)];
              ref[size_t(m * N + n)] = acc;
            }
          const CaseResult r = run_linear(layer, x, N, ref);
          ASSERT_EQ(r.status, NIBBLE_OK) << r.message;
          EXPECT_EQ(r.not_finite, 0u);
          EXPECT_LE(r.rel_error, declared_bound(k, dt)) << k->name << " " << act_name(dt);
        }
    }
  }
}

// M = 0 is a no-op: y is not touched.
TEST(ReferencePlugins, EmptyBatchIsANoOp) {
  HarnessPlugin npu("npu_ref");
  const CanonicalWeight w = random_weight(QuantSpec{64, 32, 4, 32});
  auto layer = prepare_linear(npu.kernel("linear_antiquant"), linear_desc(w), w);
  Tensor2D x(0, 64, sdk::dtype_f32()), y(0, 32, sdk::dtype_f32());
  std::string message;
  EXPECT_EQ(layer->forward(&x.t, &y.t, nullptr, nullptr, 2, &message), NIBBLE_OK) << message;
}

// shutdown returns after a forward has started oneTBB's workers (and joins them when nothing else
// in the process holds the scheduler); a later forward still works, as oneTBB restarts lazily.
TEST(ReferencePlugins, ShutdownAfterWorkReturns) {
  for (const std::string name : {"npu_ref", "gpu_ref"}) {
    HarnessPlugin p(name);
    const CanonicalWeight w = random_weight(QuantSpec{256, 128, 4, 64});
    auto layer = prepare_linear(p.kernels(NIBBLE_OP_LINEAR).back(), linear_desc(w), w);
    const Activations x = random_activations(64, w.K, sdk::dtype_f32(), 1);
    const std::vector<double> ref = reference_linear(w, x.values, 64);
    ASSERT_EQ(run_linear(*layer, x, w.N, ref).status, NIBBLE_OK);
    p.plugin().shutdown();
    const CaseResult again = run_linear(*layer, x, w.N, ref);
    ASSERT_EQ(again.status, NIBBLE_OK);
    EXPECT_LE(again.rel_error, 1e-5);
  }
}

}  // namespace
}  // namespace nibble::test
