// dense_onednn: unquantized linear layers (routers, modules_to_not_convert) through oneDNN bf16,
// against float64 on f32/f16/bf16 weights and activations, bias on/off, ragged shapes.
#include <gtest/gtest.h>

#include <random>

#include "cpu_amx_test_util.hpp"

namespace nibble::test {
namespace {

TEST(CpuAmxDense, MatchesFloat64) {
  const nibble_kernel* k = cpu_amx().kernel("dense_onednn");
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
        nibble_weight_input in{};
        in.struct_size = sizeof in;
        in.dense = &dw;
        nibble_prepared* p = nullptr;
        ErrorText err;
        ASSERT_EQ(k->prepare(k, &d, &in, &p, err.get()), NIBBLE_OK) << err.text();
        PreparedLayer layer(k, p);
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
        EXPECT_LE(relative_error(r.values, ref), k->error_bound_f32)
            << "K=" << s.K << " N=" << s.N << " M=" << M << " w=" << sdk::dtype_name(wt);
      }
}

TEST(CpuAmxDense, RefusesQuantizedLayers) {
  const nibble_kernel* k = cpu_amx().kernel("dense_onednn");
  TestWeight w = random_weight(QuantSpec{});
  EXPECT_NE(why_not(k, w.linear_desc()), "");
}

}  // namespace
}  // namespace nibble::test
