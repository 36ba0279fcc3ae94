// The cuda plugin through its C ABI: the probe and device checks (everywhere), then on a GPU every
// linear and dense kernel against the float64 reference with tensors allocated through the
// plugin's own device memory — Marlin where its rules hold (row counts that reach each of its
// kernels: streaming, tiled, warpgroup MMA on compute capability 9.0, dequantize-then-cuBLAS), the
// general kernel for the weights Marlin refuses (each refusal names its reason), cuBLAS for dense
// layers.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "plugin_device.hpp"

namespace nibble::test {
namespace {

int runtime_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

TEST(CudaPlugin, ProbeSaysWhetherAndWhy) {
  const nibble_plugin& p = cuda_plugin().plugin();
  ASSERT_NE(p.probe2, nullptr);
  nibble_probe_result r{};
  r.struct_size = sizeof r;
  ASSERT_EQ(p.probe2(p.plugin_context, &r), NIBBLE_OK);
  const std::string detail = r.detail;
  if (runtime_device_count() == 0) {
    EXPECT_EQ(r.available, 0);
    EXPECT_NE(r.reasons & (NIBBLE_PROBE_DEVICE_ABSENT | NIBBLE_PROBE_DEPENDENCY_MISSING), 0u);
    EXPECT_NE(detail.find("CUDA"), std::string::npos) << detail;
  } else {
    EXPECT_EQ(r.available, 1) << detail;
    EXPECT_NE(detail.find("SMs"), std::string::npos) << detail;
  }
}

TEST(CudaPlugin, KernelsRunOnCudaAndMemoryCountsDevices) {
  const nibble_plugin& p = cuda_plugin().plugin();
  ASSERT_GE(p.kernel_count, 4u);
  for (uint32_t i = 0; i < p.kernel_count; ++i)
    EXPECT_EQ(p.kernels[i]->device_type, kDLCUDA) << p.kernels[i]->name;
  ASSERT_NE(p.device_memory, nullptr);
  EXPECT_EQ(p.device_memory->device_type, kDLCUDA);
  EXPECT_EQ(p.device_memory->device_count(p.plugin_context), runtime_device_count());
}

TEST(CudaPlugin, RefusesADeviceThatIsNotThereAndHostLayers) {
  const CanonicalWeight w = random_weight(QuantSpec{256, 128, 4, 128, true});
  const nibble_layer_desc d = linear_desc(w);
  const nibble_kernel* k = cuda_plugin().kernel("linear_marlin");
  ASSERT_NE(k, nullptr);
  EXPECT_NE(why_not(k, on_cuda(d, runtime_device_count())).find("does not exist"),
            std::string::npos);
  EXPECT_NE(why_not(k, d).find("the layer is on cpu"), std::string::npos) << why_not(k, d);
}

struct Linear {
  QuantSpec spec;
  std::string kernel;
  std::string marlin_refusal;  // what linear_marlin's reason must say ("" when it takes it)
};

QuantSpec spec(int64_t K, int64_t N, int bits, int gs, bool sym, bool act_order, uint32_t seed,
               DLDataType scales = sdk::dtype_f16()) {
  QuantSpec s;
  s.K = K;
  s.N = N;
  s.bits = bits;
  s.group_size = gs;
  s.symmetric = sym;
  s.act_order = act_order;
  s.bias = seed % 2 == 0;
  s.scales_dtype = scales;
  s.seed = seed;
  return s;
}

void run_linear_cases(const Linear& c) {
  const CanonicalWeight w = random_weight(c.spec);
  const nibble_layer_desc d = on_cuda(linear_desc(w));
  const std::string marlin_says = why_not(cuda_plugin().kernel("linear_marlin"), d);
  if (c.marlin_refusal.empty())
    EXPECT_EQ(marlin_says, "");
  else
    EXPECT_NE(marlin_says.find(c.marlin_refusal), std::string::npos) << marlin_says;
  const nibble_kernel* k = cuda_plugin().kernel(c.kernel);
  ASSERT_EQ(why_not(k, d), "") << c.kernel;
  const std::unique_ptr<PreparedLayer> p = prepare_linear(k, d, w);
  EXPECT_GT(p->bytes(), size_t(w.K * w.N * w.bits / 8));
  for (DLDataType dt : {sdk::dtype_bf16(), sdk::dtype_f16(), sdk::dtype_f32()})
    for (int64_t M : {1, 3, 16, 64, 65, 300, 600}) {
      const Activations x = random_activations(M, w.K, dt, uint32_t(M) + c.spec.seed);
      const int64_t ld = M % 2 == 1 ? w.K + 8 : 0;  // odd M: a row stride past K
      DeviceTensor dx(M, w.K, dt, ld), dy(M, w.N, dt, M % 2 == 1 ? w.N + 3 : 0);
      dx.upload(x.bytes);
      const DeviceRun r = run_on_device(*p, dx, dy, reference_linear(w, x.values, M));
      ASSERT_EQ(r.status, NIBBLE_OK) << r.message;
      EXPECT_EQ(r.not_finite, 0u) << c.kernel << " M" << M;
      EXPECT_LE(r.rel_error, bound_for(dt)) << c.kernel << " " << sdk::dtype_name(dt) << " M" << M;
    }
}

TEST(CudaPluginLinear, MarlinWhereItsRulesHold) {
  NIBBLE_REQUIRE_GPU();
  run_linear_cases({spec(512, 256, 4, 128, true, false, 1), "linear_marlin", ""});
  run_linear_cases({spec(512, 128, 4, 128, false, false, 2), "linear_marlin", ""});  // AWQ-like
  run_linear_cases({spec(1024, 192, 4, 128, true, true, 3), "linear_marlin", ""});   // act-order
  run_linear_cases({spec(384, 64, 4, -1, false, false, 4, sdk::dtype_bf16()), "linear_marlin", ""});
  run_linear_cases({spec(256, 128, 8, 32, false, false, 5), "linear_marlin", ""});
  run_linear_cases({spec(512, 64, 8, 64, true, true, 6, sdk::dtype_f32()), "linear_marlin", ""});
}

TEST(CudaPluginLinear, GeneralKernelTakesWhatMarlinRefuses) {
  NIBBLE_REQUIRE_GPU();
  run_linear_cases(
      {spec(512, 96, 4, 128, true, false, 11), "linear_general", "not a multiple of 64"});
  run_linear_cases(
      {spec(200, 64, 4, 40, true, false, 12), "linear_general", "not a multiple of 128"});
  run_linear_cases({spec(512, 128, 4, 256, false, false, 13), "linear_general", "group size 256"});
  run_linear_cases(
      {spec(512, 64, 4, 128, false, true, 14), "linear_general", "act-order with zero points"});
  run_linear_cases({spec(384, 64, 8, 96, false, true, 15), "linear_general", "group size 96"});
  QuantSpec v1 = spec(256, 64, 4, 128, false, false, 16);
  v1.v1_zero16 = true;  // GPTQ v1: zero points 1..16
  run_linear_cases({v1, "linear_general", "does not fit Marlin's uint4 zero points"});
}

// Weights whose dequantized values pass f16's range (|q − z|·s up to 15 × 9000) with small f16
// activations whose products fit: the large-M path would write infinities into an f16 weight, so
// f16 calls stay on the tiled kernel, and bf16 calls (whose range holds them) take that path.
TEST(CudaPluginLinear, MarlinKeepsF16WeightsWithinTheirRange) {
  NIBBLE_REQUIRE_GPU();
  CanonicalWeight w = random_weight(spec(512, 128, 4, 128, false, false, 18, sdk::dtype_f32()));
  std::mt19937 rng(18);
  std::uniform_real_distribution<float> big(5000.f, 9000.f);
  for (size_t i = 0; i < size_t(w.num_groups * w.N); ++i)
    sdk::store_float(w.scales.data(), w.scales_dtype, i, (i % 2 ? -1.f : 1.f) * big(rng));
  const nibble_layer_desc d = on_cuda(linear_desc(w));
  const nibble_kernel* k = cuda_plugin().kernel("linear_marlin");
  ASSERT_EQ(why_not(k, d), "");
  const std::unique_ptr<PreparedLayer> p = prepare_linear(k, d, w);
  for (DLDataType dt : {sdk::dtype_f16(), sdk::dtype_bf16()})
    for (int64_t M : {16, 65, 300}) {
      Activations x = random_activations(M, w.K, dt, uint32_t(M) + 18);
      for (size_t i = 0; i < x.values.size(); ++i) {  // outputs of ~|100|, far inside f16
        sdk::store_float(x.bytes.data(), dt, i, x.values[i] * 1e-4f);
        x.values[i] = sdk::load_float(x.bytes.data(), dt, i);
      }
      DeviceTensor dx(M, w.K, dt), dy(M, w.N, dt);
      dx.upload(x.bytes);
      const DeviceRun r = run_on_device(*p, dx, dy, reference_linear(w, x.values, M));
      ASSERT_EQ(r.status, NIBBLE_OK) << r.message;
      EXPECT_EQ(r.not_finite, 0u) << sdk::dtype_name(dt) << " M" << M;
      EXPECT_LE(r.rel_error, bound_for(dt)) << sdk::dtype_name(dt) << " M" << M;
    }
}

// A zero point of 16 the descriptor did not announce: Marlin finds out at prepare and says so.
TEST(CudaPluginLinear, MarlinRefusesZeroSixteenAtPrepare) {
  NIBBLE_REQUIRE_GPU();
  QuantSpec s = spec(256, 64, 4, 128, false, false, 17);
  s.v1_zero16 = true;
  CanonicalWeight w = random_weight(s);
  w.zeros[3] = 16;
  nibble_layer_desc d = on_cuda(linear_desc(w));
  d.max_zero = 0;  // unknown
  try {
    prepare_linear(cuda_plugin().kernel("linear_marlin"), d, w);
    ADD_FAILURE() << "linear_marlin prepared a zero point of 16";
  } catch (const sdk::host::CallError& e) {
    EXPECT_EQ(e.status(), NIBBLE_UNSUPPORTED);
    EXPECT_NE(std::string(e.what()).find("does not fit Marlin's uint4"), std::string::npos)
        << e.what();
  }
}

TEST(CudaPluginDense, CublasOnEveryDtypePair) {
  NIBBLE_REQUIRE_GPU();
  for (DLDataType wt : {sdk::dtype_bf16(), sdk::dtype_f16(), sdk::dtype_f32()})
    for (bool bias : {false, true}) {
      const TestDense w = random_dense(320, 72, wt, bias, 21);
      const nibble_layer_desc d = on_cuda(w.desc());
      const nibble_kernel* k = cuda_plugin().kernel("dense_cublas");
      ASSERT_EQ(why_not(k, d), "");
      const nibble_dense_weight view = w.view();
      PreparedLayer p(sdk::host::prepare(k, d, sdk::host::dense_input(view)));
      for (DLDataType xt : {sdk::dtype_bf16(), sdk::dtype_f16(), sdk::dtype_f32()})
        for (int64_t M : {1, 7, 130}) {
          const Activations x = random_activations(M, w.K, xt, uint32_t(M));
          DeviceTensor dx(M, w.K, xt), dy(M, w.N, xt, M == 7 ? w.N + 5 : 0);
          dx.upload(x.bytes);
          const DeviceRun r = run_on_device(p, dx, dy, reference_dense(w, x.values, M));
          ASSERT_EQ(r.status, NIBBLE_OK) << r.message;
          EXPECT_EQ(r.not_finite, 0u);
          EXPECT_LE(r.rel_error, bound_for(xt))
              << sdk::dtype_name(wt) << " weight, x " << sdk::dtype_name(xt) << " M" << M;
        }
    }
}

}  // namespace
}  // namespace nibble::test
