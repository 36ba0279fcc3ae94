// Activation preparation (activations.cpp, activation_rows_avx512.cpp), compiled into the test:
// the portable row kernels against the definitions written out here, the AVX-512 ones bit for bit
// against the portable ones (special values included), and whole fills identical at every ISA
// level for plain and act-order weights.
#include <gtest/gtest.h>

#include "activation_rows.hpp"
#include "activations.hpp"
#include "packed_weight.hpp"
#include "probe.hpp"
#include "reference.hpp"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <utility>

namespace nibble::cpu_amx {
namespace {

bool have_avx512() { return decide_isa().hardware >= IsaLevel::avx512; }

// x's rows as the fills take them: a 2-D tensor over its bytes.
struct RowsOf {
  RowsOf(test::Activations& x, int64_t M, int64_t K, DLDataType dt) : shape{M, K} {
    t.data = x.bytes.data();
    t.device = DLDevice{kDLCPU, 0};
    t.ndim = 2;
    t.dtype = dt;
    t.shape = shape;
  }
  RowsOf(const RowsOf&) = delete;
  RowsOf& operator=(const RowsOf&) = delete;
  sdk::Matrix matrix() const { return sdk::as_matrix(&t, "x"); }
  int64_t shape[2];
  DLTensor t{};
};

// The source channel of every slot of a packed weight (-1 for padding), from its runs or its
// per-slot map.
std::vector<int32_t> slot_sources(const PackedLinear& w) {
  std::vector<int32_t> source(size_t(w.Kp), -1);
  for (const auto& run : w.runs)
    for (int32_t i = 0; i < run.len; ++i) source[size_t(run.dst + i)] = run.src + i;
  for (size_t j = 0; j < w.slot_source.size(); ++j) source[j] = w.slot_source[j];
  return source;
}

// Random floats with the values conversions get wrong: NaN, ±inf, ±0, subnormals, bf16 ties.
std::vector<float> awkward_floats(size_t n, uint32_t seed, bool specials) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 3.f);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    v[i] = nd(rng);
    if (!specials) continue;
    switch (rng() % 16) {
      case 0:
        v[i] = std::numeric_limits<float>::quiet_NaN();
        break;
      case 1:
        v[i] = std::numeric_limits<float>::infinity();
        break;
      case 2:
        v[i] = -0.f;
        break;
      case 3:
        v[i] = std::numeric_limits<float>::denorm_min() * float(rng() % 1000);
        break;
      case 4: {  // exactly halfway between two bf16 values
        uint32_t u = (rng() & 0x3fff0000u) | 0x8000u;
        std::memcpy(&v[i], &u, 4);
        break;
      }
      default:
        break;
    }
  }
  return v;
}

TEST(CpuAmxActivationRows, PortableKernelsFollowTheirDefinitions) {
  const RowKernels rk = row_kernels(IsaLevel::scalar);
  const std::vector<float> x = awkward_floats(4096, 7, false);
  // to_bf16 is sdk::f32_to_bf16 element by element.
  std::vector<uint16_t> b(x.size());
  rk.to_bf16(x.data(), int64_t(x.size()), b.data());
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(b[i], sdk::f32_to_bf16(x[i])) << i;
  // The sum is within fp32 rounding of the exact sum.
  double exact = 0, mag = 0;
  for (uint16_t h : b) exact += sdk::bf16_to_f32(h), mag += std::fabs(sdk::bf16_to_f32(h));
  EXPECT_NEAR(rk.sum_bf16(b.data(), int64_t(b.size())), exact, mag * 4096 * 0x1p-24);
  // Quantization: amax, sa, round-half-even, clamp, and the A8 slot positions.
  std::vector<int8_t> q(x.size());
  const float sa = rk.quantize(x.data(), int64_t(x.size()), q.data());
  float amax = 0;
  for (float f : x) amax = std::max(amax, std::fabs(f));
  EXPECT_EQ(sa, amax / 127.f);
  for (size_t k = 0; k < x.size(); ++k) {
    const float want = std::min(127.f, std::max(-127.f, std::nearbyint(x[k] * (127.f / amax))));
    ASSERT_EQ(q[(k & ~size_t(7)) + size_t(a8_position(int(k & 7)))], int8_t(want)) << k;
  }
  // An all-zero row quantizes with amax 1e-7 (no division by zero).
  std::vector<float> zeros(32, 0.f);
  EXPECT_EQ(rk.quantize(zeros.data(), 32, q.data()), 1e-7f / 127.f);
  for (int k = 0; k < 32; ++k) EXPECT_EQ(q[size_t(k)], 0);
  // A NaN anywhere makes the scale NaN (the max alone would skip it); an infinity makes it inf.
  for (int at : {0, 17, 31}) {
    std::vector<float> row = awkward_floats(32, uint32_t(at), false);
    row[size_t(at)] = std::numeric_limits<float>::quiet_NaN();
    EXPECT_TRUE(std::isnan(rk.quantize(row.data(), 32, q.data()))) << at;
    row[size_t(at)] = -std::numeric_limits<float>::infinity();
    EXPECT_EQ(rk.quantize(row.data(), 32, q.data()), std::numeric_limits<float>::infinity()) << at;
  }
}

// The fixed-point value of slot k of a chunk, from its high and low bytes.
int32_t fixed_value(const std::vector<int8_t>& hi, const std::vector<int8_t>& lo, size_t k) {
  const size_t at = (k & ~size_t(7)) + size_t(a8_position(int(k & 7)));
  return 256 * int32_t(hi[at]) + int32_t(lo[at]);
}

TEST(CpuAmxActivationRows, PortableFixedPointFollowsItsDefinition) {
  const RowKernels rk = row_kernels(IsaLevel::scalar);
  std::vector<int8_t> hi(128), lo(128);
  // Chunks of ordinary, huge, tiny and subnormal magnitudes.
  for (float scale : {1.f, 3e37f, 1e-30f, 1e-41f}) {
    std::vector<float> x = awkward_floats(128, uint32_t(scale * 1e3f) + 1, false);
    for (float& f : x) f *= scale;
    const FixedChunk f = rk.to_fixed(x.data(), 128, hi.data(), lo.data());
    float amax = 0;
    for (float v : x) amax = std::max(amax, std::fabs(v));
    int e;
    std::frexp(amax, &e);  // amax = m · 2^e, m in [0.5, 1): its exponent is e − 1
    const int shift = 13 - std::max(e - 1, -126);
    ASSERT_EQ(f.step, std::ldexp(1.f, -shift)) << scale;
    int32_t sum = 0;
    for (size_t k = 0; k < x.size(); ++k) {
      const size_t at = (k & ~size_t(7)) + size_t(a8_position(int(k & 7)));
      const int32_t v = fixed_value(hi, lo, k);
      ASSERT_EQ(v, int32_t(std::nearbyint(std::ldexp(double(x[k]), shift)))) << scale << " " << k;
      ASSERT_LE(std::abs(v), 1 << 14);
      ASSERT_LE(std::abs(int(hi[at])), 64);
      ASSERT_EQ(int(hi[at]), (v + 128) >> 8);
      // Every value within half a step, so within 2^-14 of the chunk's largest magnitude where
      // that is a normal number (below, the step stays 2^-139).
      const double err = std::fabs(double(x[k]) - double(v) * double(f.step));
      ASSERT_LE(err, 0.5 * double(f.step)) << scale << " " << k;
      if (amax >= std::numeric_limits<float>::min()) {
        ASSERT_LE(err, double(amax) * 0x1p-14) << scale << " " << k;
      }
      sum += v;
    }
    EXPECT_EQ(f.sum, sum) << scale;
  }
  // Values within 2^6 of the chunk's largest are exact when they are bf16 values.
  std::vector<float> b = awkward_floats(128, 5, false);
  for (float& v : b) v = sdk::bf16_to_f32(sdk::f32_to_bf16(v));
  b[3] = 4.f;  // largest magnitude; the others are N(0, 3) clipped to ±4 below
  for (float& v : b) v = std::max(-4.f, std::min(4.f, v));
  const FixedChunk fb = rk.to_fixed(b.data(), 128, hi.data(), lo.data());
  for (size_t k = 0; k < b.size(); ++k)
    if (std::fabs(b[k]) >= 4.f / 64) {
      ASSERT_EQ(double(fixed_value(hi, lo, k)) * double(fb.step), double(b[k])) << k;
    }
  // All zeros: step 1, zero bytes. A NaN or an infinity anywhere: step NaN, zero bytes.
  std::vector<float> zeros(32, 0.f);
  const FixedChunk fz = rk.to_fixed(zeros.data(), 32, hi.data(), lo.data());
  EXPECT_EQ(fz.step, 1.f);
  EXPECT_EQ(fz.sum, 0);
  for (float bad :
       {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity()})
    for (int at : {0, 17, 31}) {
      std::vector<float> row = awkward_floats(32, uint32_t(at), false);
      row[size_t(at)] = bad;
      hi.assign(32, 1);
      lo.assign(32, 1);
      const FixedChunk fn = rk.to_fixed(row.data(), 32, hi.data(), lo.data());
      EXPECT_TRUE(std::isnan(fn.step)) << at;
      EXPECT_EQ(hi, std::vector<int8_t>(32, 0)) << at;
      EXPECT_EQ(lo, std::vector<int8_t>(32, 0)) << at;
    }
}

// to_fixed_from is its definition: the first `valid` of n slots widened from the source, the rest
// zero, then to_fixed; at every ISA level, for every source dtype, special values included. The
// source holds the valid values only (one element where none are), so that the portable path's
// reads past them are caught under AddressSanitizer (the AVX-512 loads are masked).
// sum_i8 is the exact sum of the bytes.
TEST(CpuAmxActivationRows, FusedFixedPointAndByteSumsFollowTheirDefinitions) {
  std::vector<IsaLevel> levels{IsaLevel::scalar};
  if (have_avx512()) levels.push_back(IsaLevel::avx512);
  const RowKernels def = row_kernels(IsaLevel::scalar);
  for (IsaLevel level : levels) {
    const RowKernels rk = row_kernels(level);
    for (DLDataType dt : {sdk::dtype_f32(), sdk::dtype_f16(), sdk::dtype_bf16()})
      for (int64_t n : {32, 64, 96, 128})
        for (int64_t valid :
             {int64_t(0), int64_t(1), int64_t(15), int64_t(16), int64_t(17), n - 20, n - 1, n})
          for (bool specials : {false, true}) {
            const std::vector<float> x = awkward_floats(
                size_t(valid), uint32_t(n * 1000 + valid * 2 + (specials ? 1 : 0)), specials);
            std::vector<uint8_t> src(size_t(std::max<int64_t>(valid, 1)) * sdk::dtype_bytes(dt));
            for (int64_t i = 0; i < valid; ++i)
              sdk::store_float(src.data(), dt, size_t(i), x[size_t(i)]);
            std::vector<float> slots(size_t(n), 0.f);
            if (valid > 0) def.widen(src.data(), dt, valid, slots.data());
            std::vector<int8_t> hw(size_t(n), 5), lw(size_t(n), 5), hg(size_t(n), 9),
                lg(size_t(n), 9);
            const FixedChunk want = def.to_fixed(slots.data(), n, hw.data(), lw.data());
            const FixedChunk got = rk.to_fixed_from(src.data(), dt, valid, n, hg.data(), lg.data());
            const std::string at = std::string(isa_name(level)) + " " + sdk::dtype_name(dt) +
                                   " n=" + std::to_string(n) + " valid=" + std::to_string(valid);
            EXPECT_EQ(0, std::memcmp(&want.step, &got.step, 4)) << at;
            EXPECT_EQ(want.sum, got.sum) << at;
            EXPECT_EQ(hw, hg) << at;
            EXPECT_EQ(lw, lg) << at;
          }
    for (int64_t n : {1, 63, 64, 65, 200, 4096}) {
      std::mt19937 rng{uint32_t(n)};
      std::vector<int8_t> b(static_cast<size_t>(n));
      int32_t sum = 0;
      for (auto& v : b) {
        v = int8_t(int(rng() % 256) - 128);
        sum += v;
      }
      EXPECT_EQ(rk.sum_i8(b.data(), n), sum) << isa_name(level) << " n=" << n;
    }
    std::vector<int8_t> low(128, -128);
    EXPECT_EQ(rk.sum_i8(low.data(), 128), -128 * 128) << isa_name(level);
  }
}

TEST(CpuAmxActivationRows, Avx512KernelsGiveThePortableBits) {
  if (!have_avx512()) GTEST_SKIP() << "no AVX-512 on this machine";
  const RowKernels p = row_kernels(IsaLevel::scalar), v = row_kernels(IsaLevel::avx512);
  for (int64_t n : {16, 48, 1024, 4112}) {
    const std::vector<float> x = awkward_floats(size_t(n) + 5, uint32_t(n), true);
    // widen: f32, f16 and bf16 sources, lengths that leave a partial vector.
    for (DLDataType dt : {sdk::dtype_f32(), sdk::dtype_f16(), sdk::dtype_bf16()}) {
      const int64_t len = n + 5;
      std::vector<uint8_t> src(size_t(len) * sdk::dtype_bytes(dt));
      for (int64_t i = 0; i < len; ++i) sdk::store_float(src.data(), dt, size_t(i), x[size_t(i)]);
      std::vector<float> a(static_cast<size_t>(len)), b(static_cast<size_t>(len));
      p.widen(src.data(), dt, len, a.data());
      v.widen(src.data(), dt, len, b.data());
      ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4)) << sdk::dtype_name(dt) << n;
    }
    std::vector<uint16_t> hp(size_t(n) + 5), hv(size_t(n) + 5);
    p.to_bf16(x.data(), n + 5, hp.data());
    v.to_bf16(x.data(), n + 5, hv.data());
    ASSERT_EQ(hp, hv) << "to_bf16 n=" << n;
    // Sums and quantization on finite rows (a NaN or inf makes both NaN-valued, compared below).
    const std::vector<float> f = awkward_floats(size_t(n), uint32_t(n) + 1, false);
    std::vector<uint16_t> fb(static_cast<size_t>(n));
    p.to_bf16(f.data(), n, fb.data());
    const float sp = p.sum_bf16(fb.data(), n), sv = v.sum_bf16(fb.data(), n);
    EXPECT_EQ(0, std::memcmp(&sp, &sv, 4)) << "sum n=" << n << ": " << sp << " vs " << sv;
    for (const std::vector<float>* row : {&f, &x}) {
      std::vector<int8_t> qp(static_cast<size_t>(n)), qv(static_cast<size_t>(n));
      const float ap = p.quantize(row->data(), n, qp.data());
      const float av = v.quantize(row->data(), n, qv.data());
      EXPECT_EQ(0, std::memcmp(&ap, &av, 4)) << "sa n=" << n;
      EXPECT_EQ(qp, qv) << "quantize n=" << n;
    }
    std::vector<float> tiny = f, huge = f;
    for (float& t : tiny) t *= 1e-40f;  // subnormal
    for (float& t : huge) t *= 1e37f;
    for (const std::vector<float>* row : {&f, &x, &std::as_const(tiny), &std::as_const(huge)}) {
      std::vector<int8_t> hp(size_t(n), 7), lp(size_t(n), 7), hv(size_t(n), 9), lv(size_t(n), 9);
      const FixedChunk a = p.to_fixed(row->data(), n, hp.data(), lp.data());
      const FixedChunk b = v.to_fixed(row->data(), n, hv.data(), lv.data());
      EXPECT_EQ(0, std::memcmp(&a.step, &b.step, 4)) << "step n=" << n;
      EXPECT_EQ(a.sum, b.sum) << "fixed sum n=" << n;
      EXPECT_EQ(hp, hv) << "fixed high bytes n=" << n;
      EXPECT_EQ(lp, lv) << "fixed low bytes n=" << n;
    }
  }
}

// MoE prepares each token's fixed-point row once and copies it to each expert it is routed to:
// the copy must hold exactly what preparing the expert's rows from x makes, every byte of the
// buffer (steps and sums included; nothing written past row n).
TEST(CpuAmxActivations, FixedPointGatherCopiesWhatTheRowFillMakes) {
  test::QuantSpec spec;
  spec.K = 200;
  spec.N = 32;
  spec.group_size = 64;
  spec.act_order = true;
  spec.seed = 8;
  test::CanonicalWeight tw = test::random_weight(spec);
  nibble_canonical_weight cw = tw.view();
  sdk::QuantWeight w(cw, "gather");
  auto packed = pack_linear(w, 1);
  const int64_t M = 5;
  const auto xt = test::tensor_of(test::random_activations(M, spec.K, sdk::dtype_bf16(), 12));
  const sdk::Matrix xm = sdk::as_matrix(&xt->t, "x");
  const IsaLevel level = have_avx512() ? IsaLevel::avx512 : IsaLevel::scalar;
  std::vector<uint8_t> tokens(a16_fixed_workspace_bytes(*packed, M), 0xAB);
  a16_fixed_fill(xm, *packed, a16_fixed_view(*packed, M, tokens.data()), 0, M, level);
  const int64_t source[] = {3, 0, 3, 4};
  const int64_t n = 4;
  std::vector<uint8_t> gathered(a16_fixed_workspace_bytes(*packed, n), 0xAB), filled = gathered;
  a16_fixed_gather(a16_fixed_view(*packed, M, tokens.data()), source, n,
                   a16_fixed_view(*packed, n, gathered.data()), 0, 2);
  a16_fixed_gather(a16_fixed_view(*packed, M, tokens.data()), source, n,
                   a16_fixed_view(*packed, n, gathered.data()), 2, 8);  // clipped at n
  a16_fixed_fill_rows(xm, source, n, *packed, a16_fixed_view(*packed, n, filled.data()), 0, n,
                      level);
  EXPECT_EQ(gathered, filled);
  const A16FixedActivations g = a16_fixed_view(*packed, n, gathered.data());
  EXPECT_NE(g.sum[0], g.sum[size_t(g.chunks)]) << "rows 0 and 1 come from different tokens";
}

// A fixed-point row is, chunk by chunk, its slots (the source channels in slot order, zero in
// padding) converted by to_fixed, whether the fill converts a chunk straight from x or stages it,
// and whichever pieces of the row's chunks it is cut into, or rows of x it takes (MoE's token
// rows): every byte of the buffer (both byte rows with their padding, the steps and the sums) is
// compared with that definition. Layouts: without act-order one run (ragged K and groups of 32
// to 128 and per channel: chunks that end in padding), and act-order, whose g_idx is random (a
// per-slot map), or moves whole groups (runs in another order: chunks whose channels start
// elsewhere than their slots, one ending in padding), or splits each group into two halves far
// apart (two runs in one chunk, staged).
TEST(CpuAmxActivations, FixedPointRowsAreTheirChunksStagedThenConverted) {
  std::vector<IsaLevel> levels{IsaLevel::scalar};
  if (have_avx512()) levels.push_back(IsaLevel::avx512);
  const RowKernels def = row_kernels(IsaLevel::scalar);
  enum class GIdx { none, random, moved_groups, split_groups };
  struct Layout {
    int64_t K;
    int group;
    GIdx g_idx;
  };
  for (const Layout& l :
       {Layout{200, 64, GIdx::none}, Layout{512, 128, GIdx::none}, Layout{160, 32, GIdx::none},
        Layout{300, -1, GIdx::none}, Layout{256, 64, GIdx::random},
        Layout{200, 64, GIdx::moved_groups}, Layout{512, 128, GIdx::split_groups}})
    for (DLDataType dt : {sdk::dtype_f32(), sdk::dtype_f16(), sdk::dtype_bf16()}) {
      test::QuantSpec spec;
      spec.K = l.K;
      spec.N = 32;
      spec.group_size = l.group;
      spec.act_order = l.g_idx != GIdx::none;
      spec.seed = uint32_t(l.K);
      test::CanonicalWeight tw = test::random_weight(spec);
      const int64_t groups = (l.K + l.group - 1) / std::max(l.group, 1);
      for (int64_t c = 0; c < l.K; ++c) {
        if (l.g_idx == GIdx::moved_groups)  // group g holds the channels of block (g + 1) % G
          tw.g_idx[size_t(c)] = int32_t((c / l.group + groups - 1) % groups);
        if (l.g_idx == GIdx::split_groups)  // half blocks: g, g + 1, .., then g again
          tw.g_idx[size_t(c)] = int32_t((c / (l.group / 2)) % groups);
      }
      nibble_canonical_weight cw = tw.view();
      sdk::QuantWeight w(cw, "fixed");
      auto packed = pack_linear(w, 1);
      const std::string layout = "K=" + std::to_string(l.K) + " group " + std::to_string(l.group) +
                                 " g_idx " + std::to_string(int(l.g_idx)) + " " +
                                 sdk::dtype_name(dt);
      if (l.g_idx == GIdx::moved_groups || l.g_idx == GIdx::split_groups) {
        ASSERT_TRUE(packed->slot_source.empty()) << layout << ": expected the runs kept";
        ASSERT_GT(packed->runs.size(), size_t(1)) << layout;
      }
      const int64_t M = 3;
      test::Activations x = test::random_activations(M, l.K, dt, 21);
      const RowsOf rows_of(x, M, l.K, dt);
      const sdk::Matrix xm = rows_of.matrix();
      const std::vector<int32_t> source = slot_sources(*packed);
      // The definition, row m of the buffer from row rows[m] of x.
      auto defined = [&](const std::vector<int64_t>& rows) {
        std::vector<uint8_t> want(a16_fixed_workspace_bytes(*packed, M), 0xAB);
        const A16FixedActivations d = a16_fixed_view(*packed, M, want.data());
        for (int64_t m = 0; m < M; ++m) {
          std::vector<float> slots(size_t(packed->Kp), 0.f);
          for (int64_t s = 0; s < packed->Kp; ++s)
            if (source[size_t(s)] >= 0)
              def.widen(
                  xm.row<char>(rows[size_t(m)]) + size_t(source[size_t(s)]) * sdk::dtype_bytes(dt),
                  dt, 1, &slots[size_t(s)]);
          int8_t* hi = const_cast<int8_t*>(d.q) + size_t(2 * m * d.stride);
          int8_t* lo = hi + d.stride;
          for (size_t c = 0; c < packed->a8_chunks.size(); ++c) {
            const Chunk& ch = packed->a8_chunks[c];
            const int64_t at = int64_t(ch.tile0) * kTileK;
            const FixedChunk f =
                def.to_fixed(slots.data() + at, int64_t(ch.ntiles) * kTileK, hi + at, lo + at);
            const_cast<float*>(d.step)[size_t(m) * size_t(d.chunks) + c] = f.step;
            const_cast<int32_t*>(d.sum)[size_t(m) * size_t(d.chunks) + c] = f.sum;
          }
          std::memset(hi + packed->Kp, 0, size_t(d.stride - packed->Kp));
          std::memset(lo + packed->Kp, 0, size_t(d.stride - packed->Kp));
        }
        return want;
      };
      const std::vector<uint8_t> want = defined({0, 1, 2});
      const std::vector<int64_t> tokens = {2, 0, 2};
      const std::vector<uint8_t> want_tokens = defined(tokens);
      for (IsaLevel level : levels) {
        for (int64_t pieces : {1, 2, 3}) {
          std::vector<uint8_t> got(want.size(), 0xAB);
          for (int64_t piece = 0; piece < pieces; ++piece)
            a16_fixed_fill(xm, *packed, a16_fixed_view(*packed, M, got.data()), 0, M, level, piece,
                           pieces);
          EXPECT_EQ(want, got) << isa_name(level) << " " << layout << ", " << pieces << " pieces";
        }
        std::vector<uint8_t> rows(want.size(), 0xAB);
        a16_fixed_fill_rows(xm, tokens.data(), M, *packed, a16_fixed_view(*packed, M, rows.data()),
                            0, M, level);
        EXPECT_EQ(want_tokens, rows) << isa_name(level) << " " << layout << ", token rows";
      }
    }
}

TEST(CpuAmxActivations, FillsAreIdenticalAtEveryIsaLevel) {
  std::vector<IsaLevel> levels{IsaLevel::scalar, IsaLevel::avx2};
  if (have_avx512()) levels.push_back(IsaLevel::avx512);
  for (bool act_order : {false, true})
    for (DLDataType dt : {sdk::dtype_f32(), sdk::dtype_f16(), sdk::dtype_bf16()}) {
      test::QuantSpec spec;
      spec.K = 200;  // groups of 64 padded to 64 slots, a short last group
      spec.N = 48;
      spec.group_size = 64;
      spec.act_order = act_order;
      spec.seed = act_order ? 3 : 4;
      test::CanonicalWeight tw = test::random_weight(spec);
      nibble_canonical_weight cw = tw.view();
      sdk::QuantWeight w(cw, "fill");
      auto packed = pack_linear(w, 1);
      const int64_t M = 5;
      test::Activations x = test::random_activations(M, spec.K, dt, 9);
      const RowsOf rows_of(x, M, spec.K, dt);
      const sdk::Matrix xm = rows_of.matrix();
      std::vector<std::vector<uint8_t>> a16, a8, fixed;
      for (IsaLevel level : levels) {
        std::vector<uint8_t> bf(a16_fixed_workspace_bytes(*packed, M), 0xAB);
        a16_fixed_fill(xm, *packed, a16_fixed_view(*packed, M, bf.data()), 0, M, level);
        fixed.push_back(bf);
        std::vector<uint8_t> b16(a16_workspace_bytes(*packed, M), 0xAB);
        a16_fill(xm, *packed, a16_view(*packed, M, b16.data()), 0, padded_rows(M), level);
        a16.push_back(b16);
        std::vector<uint8_t> b8(a8_workspace_bytes(*packed, M), 0xAB);
        a8_fill(xm, *packed, a8_view(*packed, M, b8.data()), 0, padded_rows(M), level);
        a8.push_back(b8);
      }
      for (size_t i = 1; i < levels.size(); ++i) {
        EXPECT_EQ(a16[0], a16[i]) << "a16 " << isa_name(levels[i]) << " act_order " << act_order
                                  << " " << sdk::dtype_name(dt);
        EXPECT_EQ(a8[0], a8[i]) << "a8 " << isa_name(levels[i]) << " act_order " << act_order << " "
                                << sdk::dtype_name(dt);
        EXPECT_EQ(fixed[0], fixed[i]) << "fixed " << isa_name(levels[i]) << " act_order "
                                      << act_order << " " << sdk::dtype_name(dt);
      }
      // Every slot of a real row holds its source channel (bf16 of it); padding slots are zero.
      const A16Activations v = a16_view(*packed, M, a16[0].data());
      const std::vector<int32_t> source = slot_sources(*packed);
      for (int64_t m = 0; m < M; ++m)
        for (int64_t s = 0; s < packed->Kp; ++s) {
          const uint16_t got = v.x[size_t(m * v.stride + s)];
          const int32_t src = source[size_t(s)];
          const uint16_t want =
              src < 0 ? 0 : sdk::f32_to_bf16(float(x.values[size_t(m * spec.K + src)]));
          ASSERT_EQ(got, want) << "row " << m << " slot " << s;
        }
      // The fixed-point rows hold the same channels, each within half its chunk's step, and
      // zero in padding slots and past the last slot.
      const A16FixedActivations f = a16_fixed_view(*packed, M, fixed[0].data());
      for (int64_t m = 0; m < M; ++m)
        for (size_t c = 0; c < packed->a8_chunks.size(); ++c) {
          const Chunk& ch = packed->a8_chunks[c];
          const float step = f.step[size_t(m) * size_t(f.chunks) + c];
          int32_t sum = 0;
          for (int64_t s = ch.tile0 * kTileK; s < (ch.tile0 + ch.ntiles) * kTileK; ++s) {
            const size_t at = size_t((s & ~int64_t(7)) + a8_position(int(s & 7)));
            const int32_t v =
                256 * f.q[size_t(2 * m * f.stride) + at] + f.q[size_t((2 * m + 1) * f.stride) + at];
            const int32_t src = source[size_t(s)];
            const double want = src < 0 ? 0 : x.values[size_t(m * spec.K + src)];
            ASSERT_LE(std::fabs(double(v) * double(step) - want), 0.5 * double(step))
                << "row " << m << " slot " << s;
            sum += v;
          }
          EXPECT_EQ(f.sum[size_t(m) * size_t(f.chunks) + c], sum) << "row " << m << " chunk " << c;
          for (int64_t s = packed->Kp; s < f.stride; ++s) {
            ASSERT_EQ(f.q[size_t(2 * m * f.stride + s)], 0);
            ASSERT_EQ(f.q[size_t((2 * m + 1) * f.stride + s)], 0);
          }
        }
    }
}

}  // namespace
}  // namespace nibble::cpu_amx
