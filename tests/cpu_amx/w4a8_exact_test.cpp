// W4A8 bit-exactness. The oracle (tests/support/w4a8_oracle.hpp, docs/formats.md#the-w4a8-oracle)
// is first checked against the upstream-packed fixtures' expected integers and outputs; then every
// W4A8 path (NIBBLE_MAX_ISA) must reproduce the fixtures and the oracle bit for bit, for bf16
// inputs with K % 32 == 0, in bf16 and (as the fp32 accumulator itself) in f32. Compiled with
// -ffp-contract=off.
#include <gtest/gtest.h>

#include <cstring>

#include "cpu_amx_test_util.hpp"
#include "safetensors_lite.hpp"
#include "w4a8_oracle.hpp"

namespace nibble::test {
namespace {

std::string fixtures_dir() { return NIBBLE_FIXTURES_DIR; }

// Decode one of the two linear fixtures (GPTQ v1 symmetric, AWQ GEMM; docs/formats.md#gptq-packing
// and #awq-gemm-packing) into the canonical weight by hand: a few lines, independent of the core's
// decoder.
CanonicalWeight decode_fixture(const std::string& name) {
  SafetensorsFile f(fixtures_dir() + "/" + name + "/model.safetensors");
  const std::string p = "model.layers.0.self_attn.q_proj.";
  const StTensor& qw = f.get(p + "qweight");
  const StTensor& qz = f.get(p + "qzeros");
  const StTensor& sc = f.get(p + "scales");
  const StTensor& bias = f.get(p + "bias");
  const bool gptq = name.rfind("gptq", 0) == 0;
  CanonicalWeight w;
  w.bits = 4;
  w.group_size = 128;
  w.K = gptq ? qw.shape[0] * 8 : qw.shape[0];
  w.N = gptq ? qw.shape[1] : qw.shape[1] * 8;
  w.num_groups = sc.shape[0];
  w.scales_dtype = sdk::dtype_f16();
  w.q.resize(size_t(w.K * w.N));
  w.zeros.resize(size_t(w.num_groups * w.N));
  static const int kReverse[8] = {0, 4, 1, 5, 2, 6, 3, 7};
  for (int64_t k = 0; k < w.K; ++k)
    for (int64_t n = 0; n < w.N; ++n) {
      uint32_t word = gptq ? qw.at<uint32_t>(size_t((k / 8) * w.N + n))
                           : qw.at<uint32_t>(size_t(k * (w.N / 8) + n / 8));
      int shift = gptq ? 4 * int(k % 8) : 4 * kReverse[n % 8];
      w.q[size_t(n * w.K + k)] = uint8_t((word >> shift) & 0xF);
    }
  for (int64_t g = 0; g < w.num_groups; ++g)
    for (int64_t n = 0; n < w.N; ++n) {
      uint32_t word = qz.at<uint32_t>(size_t(g * (w.N / 8) + n / 8));
      int shift = gptq ? 4 * int(n % 8) : 4 * kReverse[n % 8];
      w.zeros[size_t(g * w.N + n)] = uint8_t(((word >> shift) & 0xF) + (gptq ? 1 : 0));  // v1: +1
    }
  // f16 scales and bias, copied bit for bit.
  w.scales.resize(size_t(w.num_groups * w.N) * 2);
  for (size_t i = 0; i < w.scales.size() / 2; ++i) {
    const uint16_t v = sc.at<uint16_t>(i);
    std::memcpy(&w.scales[2 * i], &v, 2);
  }
  w.bias_dtype = sdk::dtype_f16();
  w.bias.resize(size_t(w.N) * 2);
  for (size_t i = 0; i < w.bias.size() / 2; ++i) {
    const uint16_t v = bias.at<uint16_t>(i);
    std::memcpy(&w.bias[2 * i], &v, 2);
  }
  if (gptq) {
    const StTensor& gi = f.get(p + "g_idx");
    w.g_idx.resize(size_t(w.K));
    for (size_t i = 0; i < w.g_idx.size(); ++i) w.g_idx[i] = gi.at<int32_t>(i);
  }
  return w;
}

// The fixture's bf16 input rows as Activations (bf16) and the same values as f32.
Activations fixture_input(const StTensor& x, DLDataType dtype) {
  Activations a = random_activations(x.shape[0], x.shape[1], dtype, 1);
  for (int64_t i = 0; i < x.numel(); ++i) {
    float v = sdk::bf16_to_f32(x.at<uint16_t>(size_t(i)));
    sdk::store_float(a.bytes.data(), dtype, size_t(i), v);
    a.values[size_t(i)] = v;
  }
  return a;
}

const char* const kFixtures[] = {"gptq_v1_sym_g128", "awq_gemm_g128"};
const int kFixtureRows[] = {1, 7, 33};

TEST(CpuAmxW4A8, OracleReproducesTheFixtures) {
  for (const char* name : kFixtures) {
    CanonicalWeight w = decode_fixture(name);
    SafetensorsFile io(fixtures_dir() + "/" + name + "/io.safetensors");
    SafetensorsFile ex(fixtures_dir() + "/" + name + "/w4a8.safetensors");
    // The decode itself: zero points as the fixture states them.
    const StTensor& zeros = io.get("zeros");
    for (size_t i = 0; i < w.zeros.size(); ++i)
      ASSERT_EQ(int(w.zeros[i]), zeros.at<int32_t>(i)) << name;
    for (int M : kFixtureRows) {
      const std::string m = "m" + std::to_string(M);
      Activations x = fixture_input(io.get("x_bf16_" + m), sdk::dtype_f32());
      std::vector<int32_t> q;
      for (int r = 0; r < M; ++r) {
        float sa;
        w4a8_quantize_row(&x.values[size_t(r * w.K)], w.K, &q, &sa);
        ASSERT_EQ(sa, ex.get("sa_" + m).at<float>(size_t(r))) << name << " row " << r;
        for (int64_t k = 0; k < w.K; ++k)
          ASSERT_EQ(q[size_t(k)], int(ex.get("qa_" + m).at<int8_t>(size_t(r * w.K + k)))) << name;
      }
      std::vector<float> C = w4a8_oracle(w, x.values, M);
      const StTensor& c = ex.get("c_w4a8_f32_" + m);
      const StTensor& y = ex.get("y_w4a8_bf16_" + m);
      for (size_t i = 0; i < C.size(); ++i) {
        ASSERT_EQ(sdk::float_bits(C[i]), sdk::float_bits(c.at<float>(i)))
            << name << " " << m << " at " << i;
        ASSERT_EQ(sdk::f32_to_bf16(C[i]), y.at<uint16_t>(i)) << name << " " << m << " at " << i;
      }
    }
  }
}

// "amx_tiles": the AMX level with the tile kernels forced down to M = 1.
class CpuAmxW4A8Exact : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    isa_ = GetParam() == "amx_tiles" ? "amx" : GetParam();
    const std::vector<std::string> here = isa_levels_here();
    if (std::find(here.begin(), here.end(), isa_) == here.end())
      GTEST_SKIP() << GetParam() << " is not available on this machine";
    if (GetParam() == "amx_tiles") setenv("NIBBLE_CPU_AMX_SMALL_M", "0", 1);
  }
  void TearDown() override { unsetenv("NIBBLE_CPU_AMX_SMALL_M"); }
  std::string isa_;
};

TEST_P(CpuAmxW4A8Exact, ReproducesTheFixturesBitForBit) {
  MaxIsa cap(isa_);
  const nibble_kernel* k = cpu_amx().kernel("linear_a8");
  const nibble_kernel* a16 = cpu_amx().kernel("linear_a16");
  for (const char* name : kFixtures) {
    CanonicalWeight w = decode_fixture(name);
    SafetensorsFile io(fixtures_dir() + "/" + name + "/io.safetensors");
    SafetensorsFile ex(fixtures_dir() + "/" + name + "/w4a8.safetensors");
    auto layer = prepare_linear(k, desc_for(w, NIBBLE_MODE_W4A8), w);
    auto layer16 = prepare_linear(a16, desc_for(w, NIBBLE_MODE_W4A16), w);
    for (int M : kFixtureRows) {
      const std::string m = "m" + std::to_string(M);
      Activations xb = fixture_input(io.get("x_bf16_" + m), sdk::dtype_bf16());
      LinearResult r = run_linear(*layer, xb, w.N);
      ASSERT_EQ(r.status, NIBBLE_OK) << r.message;
      const StTensor& y = ex.get("y_w4a8_bf16_" + m);
      size_t diff = 0;
      for (int64_t i = 0; i < M; ++i)
        for (int64_t n = 0; n < w.N; ++n)
          diff += r.bytes.size() && std::memcmp(&r.bytes[size_t(i * r.stride + n) * 2],
                                                &y.bytes[size_t(i * w.N + n) * 2], 2) != 0;
      EXPECT_EQ(diff, 0u) << GetParam() << " " << name << " " << m;
      // f32 input of the same values: the output is the fp32 accumulator itself.
      Activations xf = fixture_input(io.get("x_bf16_" + m), sdk::dtype_f32());
      LinearResult rf = run_linear(*layer, xf, w.N);
      const StTensor& c = ex.get("c_w4a8_f32_" + m);
      diff = 0;
      for (size_t i = 0; i < rf.values.size(); ++i) diff += float(rf.values[i]) != c.at<float>(i);
      EXPECT_EQ(diff, 0u) << GetParam() << " " << name << " " << m << " (f32)";
      // And W4A16 on the same layer against the fixture's float64 output.
      LinearResult r16 = run_linear(*layer16, xf, w.N);
      const StTensor& y64 = io.get("y_bf16_" + m);
      std::vector<double> ref(size_t(y64.numel()));
      for (size_t i = 0; i < ref.size(); ++i) ref[i] = y64.at<float>(i);
      EXPECT_LE(relative_error(r16.values, ref), 1e-4) << GetParam() << " " << name << " W4A16";
    }
  }
}

TEST_P(CpuAmxW4A8Exact, MatchesTheOracleBitForBitOnRandomLayers) {
  MaxIsa cap(isa_);
  const nibble_kernel* k = cpu_amx().kernel("linear_a8");
  struct Case {
    int bits, group;
    bool sym, act, z16;
    int64_t K, N;
  };
  const Case cases[] = {
      {4, 128, false, false, true, 512, 80}, {4, 32, true, false, false, 256, 33},
      {4, 64, false, true, false, 384, 48},  {4, 256, false, false, false, 512, 40},
      {4, -1, true, false, false, 320, 16},  {8, 128, false, false, false, 256, 64},
      {8, 32, true, true, false, 192, 24},   {4, -1, false, false, true, 96, 50}};
  uint32_t seed = 11;
  for (const Case& c : cases)
    for (int64_t M : {1, 2, 3, 4, 5, 17, 64, 300}) {
      QuantSpec spec{c.K,   c.N,        c.bits, c.group,          c.sym,
                     c.act, M % 2 == 1, c.z16,  sdk::dtype_f16(), ++seed};
      CanonicalWeight w = random_weight(spec);
      auto layer = prepare_linear(k, desc_for(w, NIBBLE_MODE_W4A8), w);
      Activations x = random_activations(M, c.K, sdk::dtype_bf16(), ++seed);
      std::vector<float> C = w4a8_oracle(w, x.values, M);
      LinearResult r = run_linear(*layer, x, c.N, M == 17 ? 1 : 2);
      ASSERT_EQ(r.status, NIBBLE_OK) << r.message;
      size_t diff = 0;
      for (int64_t i = 0; i < M; ++i)
        for (int64_t n = 0; n < c.N; ++n) {
          uint16_t got;
          std::memcpy(&got, &r.bytes[size_t(i * r.stride + n) * 2], 2);
          diff += got != sdk::f32_to_bf16(C[size_t(i * c.N + n)]);
        }
      EXPECT_EQ(diff, 0u) << GetParam() << " bits " << c.bits << " group " << c.group
                          << (c.act ? " act" : "") << " K=" << c.K << " N=" << c.N << " M=" << M;
    }
}

INSTANTIATE_TEST_SUITE_P(Isa, CpuAmxW4A8Exact,
                         ::testing::Values("scalar", "avx2", "avx512", "amx", "amx_tiles"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace nibble::test
