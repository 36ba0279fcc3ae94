// dense_onednn (bf16) and dense_onednn_f32 (routers): unquantized linear layers through oneDNN,
// against float64 on f32/f16/bf16 weights and activations, bias on/off, ragged shapes, each
// within the bound it declares for the activation dtype.
#include <gtest/gtest.h>

#include <random>

#include "cpu_amx_test_util.hpp"
#include "kernel_runs.hpp"

namespace nibble::test {
namespace {

class CpuAmxDense : public ::testing::TestWithParam<const char*> {};

TEST_P(CpuAmxDense, MatchesFloat64) {
  const nibble_kernel* k = cpu_amx().kernel(GetParam());
  ASSERT_NE(k, nullptr);
  const DLDataType dtypes[] = {sdk::dtype_f32(), sdk::dtype_f16(), sdk::dtype_bf16()};
  struct Shape {
    int64_t K, N;
  };
  const Shape shapes[] = {{64, 8}, {300, 37}, {512, 128}};
  uint32_t seed = 3;
  for (const Shape& s : shapes)
    for (DLDataType wt : dtypes)
      for (int64_t M : {1, 5, 64}) {
        std::mt19937 rng(++seed);
        std::normal_distribution<float> nd(0.f, 1.f / std::sqrt(float(s.K)));
        std::vector<uint8_t> wbytes(size_t(s.K * s.N) * sdk::dtype_bytes(wt));
        std::vector<double> wd(size_t(s.K * s.N));
        for (size_t i = 0; i < wd.size(); ++i) {
          sdk::store_float(wbytes.data(), wt, i, nd(rng));
          wd[i] = sdk::load_float(wbytes.data(), wt, i);
        }
        std::vector<uint16_t> bias(size_t(s.N));
        for (auto& b : bias) b = sdk::f32_to_f16(nd(rng));
        const bool with_bias = M != 5;
        nibble_dense_weight dw{};
        dw.struct_size = sizeof dw;
        dw.K = s.K;
        dw.N = s.N;
        dw.data = wbytes.data();
        dw.dtype = wt;
        dw.bias = with_bias ? bias.data() : nullptr;
        dw.bias_dtype = sdk::dtype_f16();
        nibble_layer_desc d{};
        d.struct_size = sizeof d;
        d.op = NIBBLE_OP_DENSE;
        d.name = "router";
        d.K = s.K;
        d.N = s.N;
        d.weight_dtype = wt;
        d.numeric_mode = NIBBLE_MODE_FLOAT;
        d.act_dtypes = NIBBLE_DTYPE_F32 | NIBBLE_DTYPE_F16 | NIBBLE_DTYPE_BF16;
        ASSERT_EQ(why_not(k, d), "");
        const nibble_weight_input in = sdk::host::dense_input(dw);
        PreparedLayer layer(sdk::host::prepare(k, d, in));  // throws with the plugin's message
        const DLDataType act = dtypes[size_t(M) % 3];
        Activations x = random_activations(M, s.K, act, ++seed);
        LinearResult r = run_linear(layer, x, s.N);
        ASSERT_EQ(r.status, NIBBLE_OK) << r.message;
        EXPECT_EQ(r.non_finite, 0u);
        EXPECT_TRUE(r.padding_untouched);
        std::vector<double> ref(size_t(M * s.N));
        for (int64_t m = 0; m < M; ++m)
          for (int64_t n = 0; n < s.N; ++n) {
            double acc = with_bias ? sdk::f16_to_f32(bias[size_t(n)]) : 0.0;
            for (int64_t kk = 0; kk < s.K; ++kk)
              acc += x.values[size_t(m * s.K + kk)] * wd[size_t(n * s.K + kk)];
            ref[size_t(m * s.N + n)] = acc;
          }
        EXPECT_LE(relative_error(r.values, ref), declared_bound(k, act))
            << "K=" << s.K << " N=" << s.N << " M=" << M << " w=" << sdk::dtype_name(wt)
            << " x=" << sdk::dtype_name(act);
      }
}

INSTANTIATE_TEST_SUITE_P(Kernels, CpuAmxDense,
                         ::testing::Values("dense_onednn", "dense_onednn_f32"),
                         [](const auto& info) { return std::string(info.param); });

// Routers take the fp32 kernel (higher priority); a layer above 64 MiB in fp32 is left to the
// bf16 one, and the refusal says so.
TEST(CpuAmxDenseF32, TakesRoutersAndLeavesLargeLayersToBf16) {
  const nibble_kernel* f32 = cpu_amx().kernel("dense_onednn_f32");
  const nibble_kernel* bf16 = cpu_amx().kernel("dense_onednn");
  ASSERT_NE(f32, nullptr);
  ASSERT_NE(bf16, nullptr);
  EXPECT_GT(f32->priority, bf16->priority);
  EXPECT_LT(f32->error_bound_f32, 1e-3);
  nibble_layer_desc d{};
  d.struct_size = sizeof d;
  d.op = NIBBLE_OP_DENSE;
  d.name = "model.layers.0.mlp.gate";
  d.K = 7168;
  d.N = 256;  // DeepSeek-V3's router: 7 MiB in fp32
  d.weight_dtype = sdk::dtype_bf16();
  d.numeric_mode = NIBBLE_MODE_FLOAT;
  d.act_dtypes = NIBBLE_DTYPE_BF16;
  EXPECT_EQ(why_not(f32, d), "");
  d.name = "lm_head";
  d.K = 4096;
  d.N = 32000;  // 500 MiB in fp32
  const std::string why = why_not(f32, d);
  EXPECT_NE(why.find("64 MiB"), std::string::npos) << why;
  EXPECT_NE(why.find("dense_onednn"), std::string::npos) << why;
  EXPECT_EQ(why_not(bf16, d), "");
}

TEST_P(CpuAmxDense, RefusesQuantizedLayers) {
  const nibble_kernel* k = cpu_amx().kernel(GetParam());
  CanonicalWeight w = random_weight(QuantSpec{});
  EXPECT_NE(why_not(k, linear_desc(w)), "");
}

}  // namespace
}  // namespace nibble::test
