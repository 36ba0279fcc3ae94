// cpu_amx quantized linear kernels against the float64 reference: every scheme variant (4/8 bit,
// sym/asym with GPTQ v1's zero 16, group 32/64/128/256/-1, act-order, f16/bf16/f32 scales), ragged
// shapes, M ∈ {1,2,3,4,5,8,12,17,64,300}, bias on/off, f32/bf16/f16 activations, at every ISA level
// this machine has (NIBBLE_MAX_ISA), in both numeric modes. Outputs are poisoned and strided.
#include <gtest/gtest.h>

#include "cpu_amx_test_util.hpp"

namespace nibble::test {
namespace {

struct Scheme {
  int bits, group;
  bool sym, act_order, zero16;
  DLDataType scales;
};

std::string scheme_name(const Scheme& s) {
  return "w" + std::to_string(s.bits) + (s.sym ? "sym" : "asym") + "_g" + std::to_string(s.group) +
         (s.act_order ? "_act" : "") + (s.zero16 ? "_z16" : "") + "_" + sdk::dtype_name(s.scales);
}

const std::vector<Scheme>& schemes() {
  static const std::vector<Scheme> all = {
      {4, 128, true, false, false, sdk::dtype_f16()},
      {4, 128, false, false, true, sdk::dtype_f16()},
      {4, 32, false, false, false, sdk::dtype_bf16()},
      {4, 64, true, true, false, sdk::dtype_f16()},
      {4, 256, false, false, false, sdk::dtype_f32()},
      {4, -1, false, false, true, sdk::dtype_f16()},
      {4, -1, true, false, false, sdk::dtype_bf16()},
      {4, 128, false, true, true, sdk::dtype_f16()},
      {4, 32, true, true, false, sdk::dtype_f32()},
      {8, 128, false, false, false, sdk::dtype_f16()},
      {8, 32, true, false, false, sdk::dtype_bf16()},
      {8, -1, false, false, false, sdk::dtype_f32()},
      {8, 64, false, true, false, sdk::dtype_f16()},
      {8, 256, true, false, false, sdk::dtype_f16()},
  };
  return all;
}

struct Shape {
  int64_t K, N;
};
// Ragged on purpose: N not a multiple of 16 or 32, K not a multiple of 32 or of the group.
const Shape kShapes[] = {{256, 64}, {300, 40}, {160, 17}, {512, 48}, {100, 33}};
const int64_t kRows[] = {1, 2, 3, 4, 5, 8, 12, 17, 64, 300};
const DLDataType kActs[] = {sdk::dtype_f32(), sdk::dtype_bf16(), sdk::dtype_f16()};

double bound_for(const nibble_kernel* k, DLDataType t) {
  if (t.bits == 32) return k->error_bound_f32;
  return t.code == kDLBfloat ? k->error_bound_bf16 : k->error_bound_f16;
}

class CpuAmxLinear : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(CpuAmxLinear, MatchesFloat64OnEverySchemeShapeAndRowCount) {
  const auto [param, mode] = GetParam();
  IsaSetting setting(param);
  const std::string isa = param;
  if (!setting.available()) GTEST_SKIP() << isa << " is not available on this machine";
  ASSERT_EQ(probed_isa(), setting.isa);
  const nibble_kernel* k = cpu_amx().kernel(mode == NIBBLE_MODE_W4A16 ? "linear_a16" : "linear_a8");
  ASSERT_NE(k, nullptr);
  uint32_t seed = 7;
  double worst = 0;
  for (size_t si = 0; si < schemes().size(); ++si) {
    const Scheme& s = schemes()[si];
    for (size_t mi = 0; mi < std::size(kRows); ++mi) {
      const Shape shape = kShapes[(si + mi) % std::size(kShapes)];
      const DLDataType act = kActs[(si + mi) % 3];
      QuantSpec spec{shape.K,  shape.N,  s.bits, s.group, s.sym, s.act_order, (si + mi) % 2 == 0,
                     s.zero16, s.scales, ++seed};
      CanonicalWeight w = random_weight(spec);
      nibble_layer_desc d = desc_for(w, mode);
      ASSERT_EQ(why_not(k, d), "");
      auto layer = prepare_linear(k, d, w);
      const int64_t M = kRows[mi];
      Activations x = random_activations(M, shape.K, act, ++seed);
      LinearResult r = run_linear(*layer, x, shape.N);
      const std::string what = isa + " " + scheme_name(s) + " K=" + std::to_string(shape.K) +
                               " N=" + std::to_string(shape.N) + " M=" + std::to_string(M) +
                               " x=" + sdk::dtype_name(act) + (spec.bias ? " bias" : "");
      ASSERT_EQ(r.status, NIBBLE_OK) << what << ": " << r.message;
      EXPECT_EQ(r.non_finite, 0u) << what;
      EXPECT_TRUE(r.padding_untouched) << what << ": wrote past column N";
      const double err = relative_error(r.values, reference_linear(w, x.values, M));
      worst = std::max(worst, err);
      EXPECT_LE(err, bound_for(k, act)) << what;
    }
  }
  RecordProperty("worst_relative_error", std::to_string(worst));
}

TEST_P(CpuAmxLinear, ThreadCountDoesNotChangeResults) {
  const auto [param, mode] = GetParam();
  IsaSetting setting(param);
  const std::string isa = param;
  if (!setting.available()) GTEST_SKIP() << isa << " is not available on this machine";
  const nibble_kernel* k = cpu_amx().kernel(mode == NIBBLE_MODE_W4A16 ? "linear_a16" : "linear_a8");
  for (int64_t M : {1, 5, 64, 300}) {
    QuantSpec spec{512, 96, 4, 128, false, M == 64, true, true, sdk::dtype_f16(), uint32_t(M)};
    CanonicalWeight w = random_weight(spec);
    auto layer = prepare_linear(k, desc_for(w, mode), w);
    Activations x = random_activations(M, 512, sdk::dtype_bf16(), 99);
    LinearResult one = run_linear(*layer, x, 96, 1);
    LinearResult two = run_linear(*layer, x, 96, 2);
    ASSERT_EQ(one.status, NIBBLE_OK) << one.message;
    ASSERT_EQ(two.status, NIBBLE_OK) << two.message;
    EXPECT_EQ(one.bytes, two.bytes) << isa << " M=" << M;
  }
}

// At decode the rows are prepared either by every part for itself, in a buffer of its own thread
// (rows × K up to NIBBLE_CPU_AMX_PRIVATE_FILL, and NIBBLE_CPU_AMX_PRIVATE_TILE_FILL for W4A16's
// bf16 rows on the tiles, read at prepare), or once and shared, where the threads that would
// wait for a row share its preparation (fixed-point activations, the AMX level, chunk by chunk);
// up to 16 rows fill no padding rows. From 1 to 8 threads (up to 8
// parts, so a row in up to 8 pieces), both ways, the results are the same bytes, within the
// kernel's bound of float64, and nothing is written past column N.
TEST_P(CpuAmxLinear, DecodeRowsGiveTheSameBytesAtEveryThreadCount) {
  const auto [param, mode] = GetParam();
  IsaSetting setting(param);
  const std::string isa = param;
  if (!setting.available()) GTEST_SKIP() << isa << " is not available on this machine";
  const nibble_kernel* k = cpu_amx().kernel(mode == NIBBLE_MODE_W4A16 ? "linear_a16" : "linear_a8");
  struct Case {
    int64_t K, N;
    int group;
    bool act_order;
  };
  // 16 chunks of 128; per-channel scales over a ragged K; act-order with groups of 64.
  const Case cases[] = {{2048, 256, 128, false}, {1000, 528, -1, false}, {1536, 320, 64, true}};
  uint32_t seed = 61;
  for (const Case& c : cases) {
    QuantSpec spec{c.K, c.N, 4, c.group, false, c.act_order, true, false, sdk::dtype_f16(), ++seed};
    CanonicalWeight w = random_weight(spec);
    auto prepared_with = [&](const char* private_fill) {
      setenv("NIBBLE_CPU_AMX_PRIVATE_FILL", private_fill, 1);
      setenv("NIBBLE_CPU_AMX_PRIVATE_TILE_FILL", private_fill, 1);
      auto layer = prepare_linear(k, desc_for(w, mode), w);
      unsetenv("NIBBLE_CPU_AMX_PRIVATE_FILL");
      unsetenv("NIBBLE_CPU_AMX_PRIVATE_TILE_FILL");
      return layer;
    };
    const auto shared = prepared_with("0");
    const auto own = prepared_with("1000000");
    const DLDataType dtypes[] = {sdk::dtype_bf16(), sdk::dtype_f32(), sdk::dtype_f16()};
    int turn = 0;
    for (int64_t M : {1, 2, 3, 8, 12, 16}) {
      // bf16 rows are copied where f32 and f16 ones are converted: each M takes one in turn.
      const DLDataType dt = dtypes[turn++ % 3];
      Activations x = random_activations(M, c.K, dt, ++seed);
      const LinearResult one = run_linear(*shared, x, c.N, 1);
      ASSERT_EQ(one.status, NIBBLE_OK) << one.message;
      EXPECT_EQ(one.non_finite, 0u);
      EXPECT_LE(relative_error(one.values, reference_linear(w, x.values, M)), bound_for(k, x.dtype))
          << isa << " K=" << c.K << " M=" << M;
      for (int threads : {1, 2, 3, 5, 8})
        for (const auto* layer : {shared.get(), own.get()}) {
          const LinearResult r = run_linear(*layer, x, c.N, threads);
          ASSERT_EQ(r.status, NIBBLE_OK) << r.message;
          EXPECT_TRUE(r.padding_untouched);
          EXPECT_EQ(r.bytes, one.bytes)
              << isa << " K=" << c.K << " M=" << M << ", " << threads << " threads, "
              << (layer == own.get() ? "rows prepared by every part" : "rows shared");
        }
    }
  }
}

// The tile kernels' units of work, cut along rows (NIBBLE_CPU_AMX_UNIT_ROWS, read at prepare) or
// along panel pairs (0), their row superblocks (600 int8 rows of K = 2112 are two) and the
// dequantized W4A16 GEMM's groups of pairs (19 panels) change which thread computes what, never
// a sum's order: the results are the same bytes, and within the kernel's bound of float64.
TEST_P(CpuAmxLinear, TileUnitsDoNotChangeResults) {
  const auto [param, mode] = GetParam();
  IsaSetting setting(param);
  const std::string isa = param;
  if (!setting.available()) GTEST_SKIP() << isa << " is not available on this machine";
  if (setting.isa != "amx") GTEST_SKIP() << "only the tile kernels cut units along rows";
  const nibble_kernel* k = cpu_amx().kernel(mode == NIBBLE_MODE_W4A16 ? "linear_a16" : "linear_a8");
  const int64_t K = 2112, N = 300, M = 600;
  QuantSpec spec{K, N, 4, 64, false, true, true, false, sdk::dtype_f16(), 41};
  CanonicalWeight w = random_weight(spec);
  Activations x = random_activations(M, K, sdk::dtype_bf16(), 43);
  auto run_with = [&](const char* unit_rows, int threads) {
    setenv("NIBBLE_CPU_AMX_UNIT_ROWS", unit_rows, 1);
    auto layer = prepare_linear(k, desc_for(w, mode), w);
    unsetenv("NIBBLE_CPU_AMX_UNIT_ROWS");
    return run_linear(*layer, x, N, threads);
  };
  const LinearResult base = run_with("0", 1);
  ASSERT_EQ(base.status, NIBBLE_OK) << base.message;
  EXPECT_EQ(base.non_finite, 0u);
  EXPECT_LE(relative_error(base.values, reference_linear(w, x.values, M)), bound_for(k, x.dtype));
  for (const char* rows : {"0", "32", "64", "256"})
    for (int threads : {2, 3}) {
      const LinearResult r = run_with(rows, threads);
      ASSERT_EQ(r.status, NIBBLE_OK) << r.message;
      EXPECT_TRUE(r.padding_untouched);
      EXPECT_EQ(r.bytes, base.bytes)
          << isa << " unit rows " << rows << ", " << threads << " threads";
    }
}

INSTANTIATE_TEST_SUITE_P(IsaAndMode, CpuAmxLinear, isa_and_mode_values(), isa_and_mode_name);

TEST(CpuAmxLinearLayout, PreparedBytesStayWithin110PercentOfTheCheckpoint) {
  const nibble_kernel* k = cpu_amx().kernel("linear_a16");
  for (int bits : {4, 8})
    for (int group : {32, 64, 128, -1})
      for (bool sym : {true, false})
        for (bool act : {false, true}) {
          if (act && group == -1) continue;
          QuantSpec spec{2048, 512, bits, group, sym, act, false, false, sdk::dtype_f16(), 5};
          CanonicalWeight w = random_weight(spec);
          auto layer = prepare_linear(k, desc_for(w, NIBBLE_MODE_W4A16), w);
          const double G = double(w.num_groups), K = 2048, N = 512;
          double ckpt = K * N * bits / 8 + G * N * 2 + G * N * bits / 8 + (act ? 4 * K : 0);
          EXPECT_LE(double(layer->bytes()), 1.10 * ckpt)
              << "bits " << bits << " group " << group << (sym ? " sym" : " asym")
              << (act ? " act" : "");
          EXPECT_GT(double(layer->bytes()), ckpt * 0.9);  // the weight is really held
        }
}

TEST(CpuAmxLinearLayout, RejectsMismatchedWeights) {
  const nibble_kernel* k = cpu_amx().kernel("linear_a16");
  CanonicalWeight w = random_weight(QuantSpec{});
  nibble_layer_desc d = desc_for(w, NIBBLE_MODE_W4A16);
  d.K = w.K + 32;
  EXPECT_THROW(prepare_linear(k, d, w), std::runtime_error);
}

}  // namespace
}  // namespace nibble::test
