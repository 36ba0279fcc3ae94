// W4A16 at small M with fixed-point activations (docs/formats.md#w4a16-fixed-point), on the AMX
// int8 tiles and in the AVX-512 streaming kernel: against float64 far inside the kernel's declared
// bound, every output written, a non-finite activation confined to its row, and the switch back to
// bf16 activations (against float64 too); the same for MoE decode. Most tests need the AMX level
// (the hardware, or the tile emulation of a test build); the AVX-512 level's own runs on any
// machine with AVX-512 and VNNI.
#include <gtest/gtest.h>

#include "cpu_amx_test_util.hpp"
#include "kernel_runs.hpp"

#include <cmath>
#include <cstdlib>
#include <utility>

namespace nibble::test {
namespace {

// The fixed-point error per activation is at most half a step, 2^-14 of its chunk's largest
// magnitude (0 for bf16 values within 2^6 of it): on N(0, 1) data, with chunk maxima about 2.5
// and 3 % of the values below 1/64 of them, about 1e-5 of the outputs' norm (measured up to
// 2.2e-5). The bound leaves 4× of that; the kernel declares 1e-2.
constexpr double kFixedPointBound = 1e-4;

bool amx_here() {
  const std::vector<std::string> levels = isa_levels_here();
  return std::find(levels.begin(), levels.end(), "amx") != levels.end();
}

// N(0, 1) activations as f32 values that are bf16 values, so the bf16 tiles take them exactly too.
Activations bf16_valued_f32(int64_t M, int64_t K, uint32_t seed) {
  Activations x = random_activations(M, K, sdk::dtype_bf16(), seed);
  Activations out = random_activations(M, K, sdk::dtype_f32(), seed);
  for (size_t i = 0; i < x.values.size(); ++i) {
    sdk::store_float(out.bytes.data(), out.dtype, i, x.values[i]);
    out.values[i] = x.values[i];
  }
  return out;
}

// NIBBLE_CPU_AMX_FIXED_M=rows for layers prepared while this lives: "0" the bf16 tiles, "16" the
// fixed point up to two A tiles (9-16 rows; by default those rows stay on the bf16 tiles).
struct FixedRows {
  explicit FixedRows(const char* rows) { setenv("NIBBLE_CPU_AMX_FIXED_M", rows, 1); }
  ~FixedRows() { unsetenv("NIBBLE_CPU_AMX_FIXED_M"); }
};

struct Case {
  int bits, group;
  bool sym, act_order;
  int64_t K, N;
};
const Case kCases[] = {
    {4, 128, false, false, 512, 96}, {4, 32, true, true, 300, 40},  {4, -1, false, false, 1000, 33},
    {8, 64, false, false, 256, 64},  {8, 128, true, true, 384, 48}, {4, 64, false, true, 160, 17},
};

// Case c's weight with bf16 scales and zero points, and a label of it at M rows.
CanonicalWeight case_weight(const Case& c, uint32_t seed) {
  QuantSpec spec{c.K,         c.N,  c.bits, c.group,           c.sym,
                 c.act_order, true, false,  sdk::dtype_bf16(), seed};
  return random_weight(spec);
}
std::string case_label(const Case& c, int64_t M) {
  return "w" + std::to_string(c.bits) + " g" + std::to_string(c.group) +
         " K=" + std::to_string(c.K) + " N=" + std::to_string(c.N) + " M=" + std::to_string(M);
}

// A W4A16 layer of w prepared with the environment variable `name` set to `value`.
std::unique_ptr<PreparedLayer> prepare_with(const nibble_kernel* k, const CanonicalWeight& w,
                                            const char* name, const char* value) {
  setenv(name, value, 1);
  auto layer = prepare_linear(k, desc_for(w, NIBBLE_MODE_W4A16), w);
  unsetenv(name);
  return layer;
}

TEST(CpuAmxFixedPoint, MatchesFloat64FarInsideTheBoundAndWritesEveryOutput) {
  if (!amx_here()) GTEST_SKIP() << "no AMX level on this machine";
  MaxIsa cap("amx");
  const nibble_kernel* k = cpu_amx().kernel("linear_a16");
  uint32_t seed = 40;
  double worst_fixed = 0, worst_bf16 = 0;
  for (const Case& c : kCases)
    for (int64_t M = 1; M <= 16; ++M) {  // 9-16: two A tiles, the second of 2·(M − 8) rows
      QuantSpec spec{c.K,         c.N,        c.bits, c.group,          c.sym,
                     c.act_order, M % 2 == 0, false,  sdk::dtype_f16(), ++seed};
      CanonicalWeight w = random_weight(spec);
      std::unique_ptr<PreparedLayer> fixed, tiles;
      {
        FixedRows sixteen("16");
        fixed = prepare_linear(k, desc_for(w, NIBBLE_MODE_W4A16), w);
      }
      {
        FixedRows off("0");
        tiles = prepare_linear(k, desc_for(w, NIBBLE_MODE_W4A16), w);
      }
      Activations x = bf16_valued_f32(M, c.K, ++seed);
      const std::vector<double> ref = reference_linear(w, x.values, M);
      const std::string what = "w" + std::to_string(c.bits) + " g" + std::to_string(c.group) +
                               (c.act_order ? " act" : "") + " K=" + std::to_string(c.K) +
                               " N=" + std::to_string(c.N) + " M=" + std::to_string(M);
      LinearResult a = run_linear(*fixed, x, c.N);
      LinearResult b = run_linear(*tiles, x, c.N);
      ASSERT_EQ(a.status, NIBBLE_OK) << what << ": " << a.message;
      ASSERT_EQ(b.status, NIBBLE_OK) << what << ": " << b.message;
      EXPECT_EQ(a.non_finite, 0u) << what << ": an output was not written";
      EXPECT_TRUE(a.padding_untouched) << what << ": wrote past column N";
      const double ea = relative_error(a.values, ref), eb = relative_error(b.values, ref);
      EXPECT_LE(ea, kFixedPointBound) << what;
      EXPECT_LE(eb, kFixedPointBound) << what << " (the bf16 tiles)";
      EXPECT_NE(a.bytes, b.bytes) << what << ": NIBBLE_CPU_AMX_FIXED_M=0 changed nothing";
      worst_fixed = std::max(worst_fixed, ea);
      worst_bf16 = std::max(worst_bf16, eb);
    }
  RecordProperty("worst_relative_error_fixed_point", std::to_string(worst_fixed));
  RecordProperty("worst_relative_error_bf16_tiles", std::to_string(worst_bf16));
}

// At M = 1 to 4 the fixed point runs in the AVX-512 streaming kernel (VPDPBUSD on the high and
// low bytes of every row); forced onto the int8 tiles (NIBBLE_CPU_AMX_SMALL_M=0) the same rows
// give the same bits, NaN and infinity included.
TEST(CpuAmxFixedPoint, StreamingRowsMatchTheTilesBitForBit) {
  if (!amx_here()) GTEST_SKIP() << "no AMX level on this machine";
  MaxIsa cap("amx");
  const nibble_kernel* k = cpu_amx().kernel("linear_a16");
  uint32_t seed = 90;
  for (const Case& c : kCases) {
    const CanonicalWeight w = case_weight(c, ++seed);
    auto stream = prepare_linear(k, desc_for(w, NIBBLE_MODE_W4A16), w);
    auto tiles = prepare_with(k, w, "NIBBLE_CPU_AMX_SMALL_M", "0");
    for (int64_t M = 1; M <= 4; ++M) {
      Activations x = random_activations(M, c.K, sdk::dtype_f32(), ++seed);
      const std::string what = case_label(c, M);
      for (int poison = 0; poison < 3; ++poison) {
        if (poison > 0)
          sdk::store_float(x.bytes.data(), x.dtype, size_t(M * c.K - c.K / 3),
                           poison == 1 ? NAN : INFINITY);
        LinearResult a = run_linear(*stream, x, c.N);
        LinearResult b = run_linear(*tiles, x, c.N, 1);
        ASSERT_EQ(a.status, NIBBLE_OK) << what << ": " << a.message;
        ASSERT_EQ(b.status, NIBBLE_OK) << what << ": " << b.message;
        EXPECT_TRUE(a.padding_untouched) << what;
        EXPECT_EQ(a.bytes, b.bytes) << what << " poison " << poison;
        if (poison == 0) {
          EXPECT_EQ(a.non_finite, 0u) << what;
          EXPECT_LE(relative_error(a.values, reference_linear(w, x.values, M)), kFixedPointBound)
              << what;
        }
      }
    }
  }
}

// MoE: an expert with 1-4 routed rows runs the streaming fixed-point rows, 5-8 the int8 tiles (and
// 9-16 on two A tiles with NIBBLE_CPU_AMX_FIXED_M=16, as here), on the token's fixed-point form (at
// decode prepared once and copied to each of its experts). Forced onto the int8 tiles
// (NIBBLE_CPU_AMX_SMALL_M=0) the same call gives the same bits; at decode, on bf16 activations
// (NIBBLE_CPU_AMX_FIXED_STREAM=0, which moves only one-row experts) other bits, several times less
// accurate. w2's input h = silu(gate)·up is heavy-tailed (a block's largest magnitude far above
// most of its values), so the error is above the linear layers': measured 1.0e-4 to 2.6e-4 (bf16
// activations 1.8e-3 to 2.5e-3); the bound leaves 4× of that, the kernel declares 1e-2.
constexpr double kMoeFixedPointBound = 1e-3;
TEST(CpuAmxFixedPoint, MoeExpertRowsMatchTheTilesBitForBit) {
  if (!amx_here()) GTEST_SKIP() << "no AMX level on this machine";
  MaxIsa cap("amx");
  const nibble_kernel* k = cpu_amx().kernel("moe_a16");
  ASSERT_NE(k, nullptr);
  struct MoeCase {
    int E, top_k;
    int64_t M, K, I;
    int bits;
    bool act_order;
  };
  for (const MoeCase& c :
       {MoeCase{8, 2, 1, 512, 128, 4, false}, MoeCase{16, 8, 1, 384, 96, 4, true},
        MoeCase{64, 8, 3, 256, 64, 8, false}, MoeCase{4, 2, 8, 256, 64, 4, false},
        MoeCase{4, 4, 12, 256, 64, 4, false}}) {  // every expert 12 rows: two A tiles
    const TestExperts ex = random_experts(c.E, c.K, c.I, c.bits, 128, 64, false, c.act_order, 17);
    const nibble_layer_desc d = moe_desc(ex, c.top_k);
    FixedRows sixteen("16");
    auto stream = prepare_moe(k, d, ex);
    setenv("NIBBLE_CPU_AMX_SMALL_M", "0", 1);
    auto tiles = prepare_moe(k, d, ex);
    unsetenv("NIBBLE_CPU_AMX_SMALL_M");
    setenv("NIBBLE_CPU_AMX_FIXED_STREAM", "0", 1);
    auto bf16 = prepare_moe(k, d, ex);
    unsetenv("NIBBLE_CPU_AMX_FIXED_STREAM");
    const Activations x = random_activations(c.M, c.K, sdk::dtype_f32(), 5);
    const Routing routing = random_routing(c.M, c.top_k, c.E, 0.0, true, sdk::dtype_f32(), 6);
    const std::vector<double> ref =
        reference_moe(ex, x.values, c.M, c.top_k, routing.ids, routing.weights);
    const std::string what = "E=" + std::to_string(c.E) + " top_k=" + std::to_string(c.top_k) +
                             " M=" + std::to_string(c.M) + " w" + std::to_string(c.bits);
    for (int threads : {1, 3}) {
      const CaseResult a = run_moe(*stream, x, routing, false, ref, threads);
      const CaseResult b = run_moe(*tiles, x, routing, false, ref, threads);
      const CaseResult f = run_moe(*bf16, x, routing, false, ref, threads);
      ASSERT_EQ(a.status, NIBBLE_OK) << what << ": " << a.message;
      ASSERT_EQ(b.status, NIBBLE_OK) << what << ": " << b.message;
      ASSERT_EQ(f.status, NIBBLE_OK) << what << ": " << f.message;
      EXPECT_EQ(a.not_finite, 0u) << what << ": an output was not written";
      EXPECT_LE(a.rel_error, kMoeFixedPointBound) << what;
      EXPECT_EQ(a.y, b.y) << what << " threads " << threads << ": the tiles gave other bits";
      if (c.M * c.top_k <= c.E) {  // decode: experts of one row
        EXPECT_LT(4 * a.rel_error, f.rel_error) << what << ": no more accurate than bf16";
        EXPECT_NE(a.y, f.y) << what << ": NIBBLE_CPU_AMX_FIXED_STREAM=0 changed nothing";
      }
      if (threads == 1)
        RecordProperty("relative_error_" + std::to_string(c.E) + "x" + std::to_string(c.top_k),
                       std::to_string(a.rel_error));
    }
  }
}

// On f32 values that are not bf16 values every activation is off by up to half a step (2^-14 of its
// chunk's largest magnitude): measured 4e-5 to 1.3e-4 against float64 (bf16 activations 1.3e-3 to
// 2.4e-3, 13-37x more); the bound leaves 4x of that.
constexpr double kFixedPointF32Bound = 5e-4;

bool avx512_here() {
  const std::vector<std::string> levels = isa_levels_here();
  return std::find(levels.begin(), levels.end(), "avx512") != levels.end();
}

// Without AMX (the AVX-512 level, VNNI included) W4A16 streams every row count in fixed point: on
// f32 inputs several times more accurate than on bf16 activations (NIBBLE_CPU_AMX_FIXED_STREAM=0),
// within the fixed point's bound against float64, every output written, a NaN kept in its row.
// MoE experts take the fixed point as well, several times more accurate than on bf16 activations.
TEST(CpuAmxFixedPoint, Avx512StreamsEveryRowCountInFixedPoint) {
  if (!avx512_here()) GTEST_SKIP() << "no AVX-512 level on this machine";
  MaxIsa cap("avx512");
  const nibble_kernel* k = cpu_amx().kernel("linear_a16");
  uint32_t seed = 140;
  for (const Case& c : kCases) {
    const CanonicalWeight w = case_weight(c, ++seed);
    auto fixed = prepare_linear(k, desc_for(w, NIBBLE_MODE_W4A16), w);
    auto bf16 = prepare_with(k, w, "NIBBLE_CPU_AMX_FIXED_STREAM", "0");
    for (int64_t M : {1, 2, 3, 4, 5, 8, 17}) {
      // f32 values that bf16 rounds: the fixed point keeps about 15 bits of each.
      const Activations x = random_activations(M, c.K, sdk::dtype_f32(), ++seed);
      const std::vector<double> ref = reference_linear(w, x.values, M);
      const std::string what = case_label(c, M);
      LinearResult a = run_linear(*fixed, x, c.N, 2);
      LinearResult b = run_linear(*bf16, x, c.N, 2);
      ASSERT_EQ(a.status, NIBBLE_OK) << what << ": " << a.message;
      ASSERT_EQ(b.status, NIBBLE_OK) << what << ": " << b.message;
      EXPECT_EQ(a.non_finite, 0u) << what << ": an output was not written";
      EXPECT_TRUE(a.padding_untouched) << what << ": wrote past column N";
      const double ea = relative_error(a.values, ref), eb = relative_error(b.values, ref);
      EXPECT_LE(eb, 1e-2) << what << " (bf16, the declared bound)";
      EXPECT_LE(ea, kFixedPointF32Bound) << what;
      EXPECT_LT(8 * ea, eb) << what << ": no more accurate than bf16 activations";
      if (M == 3) {  // a NaN in row 1 leaves rows 0 and 2 as they were
        Activations bad = x;
        sdk::store_float(bad.bytes.data(), bad.dtype, size_t(c.K + c.K / 2), NAN);
        LinearResult r = run_linear(*fixed, bad, c.N, 2);
        ASSERT_EQ(r.status, NIBBLE_OK) << what << ": " << r.message;
        for (int64_t m = 0; m < M; ++m)
          for (int64_t n = 0; n < c.N; ++n) {
            const double v = r.values[size_t(m * c.N + n)];
            if (m == 1)
              ASSERT_TRUE(std::isnan(v)) << what << " n " << n;
            else
              ASSERT_EQ(v, a.values[size_t(m * c.N + n)]) << what << " row " << m;
          }
      }
    }
  }
  const nibble_kernel* moe = cpu_amx().kernel("moe_a16");
  ASSERT_NE(moe, nullptr);
  // Decode (experts of one row), experts of about 12 rows, and of 2048 (whose fixed-point rows, a
  // little longer than bf16 ones, must fit the workspace the layer asked for).
  for (const auto& [E, M] : {std::pair<int, int64_t>{16, 2}, {4, 24}, {2, 2048}}) {
    const TestExperts ex = random_experts(E, 512, 128, 4, 128, 64, false, false, 19);
    const nibble_layer_desc d = moe_desc(ex, 2);
    auto fixed = prepare_moe(moe, d, ex);
    setenv("NIBBLE_CPU_AMX_FIXED_STREAM", "0", 1);
    auto bf16 = prepare_moe(moe, d, ex);
    unsetenv("NIBBLE_CPU_AMX_FIXED_STREAM");
    const Activations x = random_activations(M, 512, sdk::dtype_f32(), 7);
    const Routing routing = random_routing(M, 2, E, 0.0, true, sdk::dtype_f32(), 8);
    const std::vector<double> ref = reference_moe(ex, x.values, M, 2, routing.ids, routing.weights);
    const CaseResult a = run_moe(*fixed, x, routing, false, ref, 2);
    const CaseResult f = run_moe(*bf16, x, routing, false, ref, 2);
    const std::string what = "MoE E=" + std::to_string(E) + " M=" + std::to_string(M);
    ASSERT_EQ(a.status, NIBBLE_OK) << what << ": " << a.message;
    ASSERT_EQ(f.status, NIBBLE_OK) << what << ": " << f.message;
    EXPECT_EQ(a.not_finite, 0u) << what;
    EXPECT_LE(a.rel_error, kMoeFixedPointBound) << what;
    EXPECT_LT(4 * a.rel_error, f.rel_error) << what << ": no more accurate than bf16";
  }
}

// The AVX-512 level's fixed-point rows are the AMX level's streaming rows: the same bits.
TEST(CpuAmxFixedPoint, Avx512RowsMatchTheAmxStreamBitForBit) {
  if (!amx_here()) GTEST_SKIP() << "no AMX level on this machine";
  const nibble_kernel* k = cpu_amx().kernel("linear_a16");
  uint32_t seed = 170;
  for (const Case& c : kCases) {
    const CanonicalWeight w = case_weight(c, ++seed);
    std::unique_ptr<PreparedLayer> amx, avx512;
    {
      MaxIsa cap("amx");
      amx = prepare_linear(k, desc_for(w, NIBBLE_MODE_W4A16), w);
    }
    {
      MaxIsa cap("avx512");
      avx512 = prepare_linear(k, desc_for(w, NIBBLE_MODE_W4A16), w);
    }
    for (int64_t M = 1; M <= 4; ++M) {
      const Activations x = random_activations(M, c.K, sdk::dtype_f32(), ++seed);
      LinearResult a = run_linear(*amx, x, c.N);
      LinearResult b = run_linear(*avx512, x, c.N);
      ASSERT_EQ(a.status, NIBBLE_OK) << a.message;
      ASSERT_EQ(b.status, NIBBLE_OK) << b.message;
      EXPECT_EQ(a.bytes, b.bytes) << case_label(c, M);
    }
  }
}

TEST(CpuAmxFixedPoint, ANonFiniteActivationStaysInItsRow) {
  if (!amx_here()) GTEST_SKIP() << "no AMX level on this machine";
  MaxIsa cap("amx");
  const nibble_kernel* k = cpu_amx().kernel("linear_a16");
  for (int bits : {4, 8}) {
    QuantSpec spec{512, 64, bits, 128, false, false, true, false, sdk::dtype_f16(), 3};
    CanonicalWeight w = random_weight(spec);
    FixedRows sixteen("16");
    auto layer = prepare_linear(k, desc_for(w, NIBBLE_MODE_W4A16), w);
    const int64_t N = 64;
    // One A tile (6 rows), and two (13 rows, the bad one in the second tile).
    for (const auto& [M, bad_row] : {std::pair<int64_t, int64_t>{6, 2}, {13, 10}}) {
      Activations x = random_activations(M, 512, sdk::dtype_f32(), 11);
      LinearResult clean = run_linear(*layer, x, N);
      ASSERT_EQ(clean.status, NIBBLE_OK) << clean.message;
      for (float bad : {std::nanf(""), INFINITY}) {
        Activations y = x;
        sdk::store_float(y.bytes.data(), y.dtype, size_t(bad_row * 512 + 300), bad);
        LinearResult r = run_linear(*layer, y, N);
        ASSERT_EQ(r.status, NIBBLE_OK) << r.message;
        for (int64_t m = 0; m < M; ++m)
          for (int64_t n = 0; n < N; ++n) {
            const double v = r.values[size_t(m * N + n)];
            if (m == bad_row)
              ASSERT_TRUE(std::isnan(v)) << "bits " << bits << " M " << M << " n " << n;
            else
              ASSERT_EQ(v, clean.values[size_t(m * N + n)])
                  << "bits " << bits << " M " << M << " row " << m;
          }
      }
    }
  }
}

}  // namespace
}  // namespace nibble::test
