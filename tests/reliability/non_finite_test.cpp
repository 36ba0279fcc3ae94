// Defined numerics for non-finite inputs: a NaN or an infinity in one input row reaches every
// output of that row (NaN stays NaN) and no other row, on every backend, in every numeric mode it
// offers, for every activation dtype, at a small and a large batch (different kernels), for
// linear layers and MoE blocks (there the other rows stay within the kernel's bound: which tokens
// share an expert changes its rounding). The W4A8 modes quantize a row with one scale, which is
// where a NaN used to be lost (a max skips NaN).
#include <nibble/error.hpp>
#include <nibble/quantize.hpp>
#include <nibble/runtime.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "../layers/layer_test_util.hpp"

namespace fs = std::filesystem;
using namespace nibble;
using namespace nibble::test;

namespace {

const fs::path& checkpoint() {
  static fs::path dir = [] {
    fs::path d = fs::path(NIBBLE_BUILD_DIR) / "tests" / ("non_finite_" + std::to_string(getpid()));
    SyntheticSpec spec;
    spec.layers = {{256, 96}};
    spec.moe = SyntheticMoe{4, 128, 64, 2};
    spec.bias = true;
    spec.seed = 41;
    QuantizeOptions o;
    o.group_size = 64;
    write_checkpoint(d, make_synthetic_model(spec, o, SchemeKind::GptqV2), SchemeKind::GptqV2, o);
    return d;
  }();
  return dir;
}

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

struct Poison {
  int64_t row;
  float value;
};

// Rows 1..3 get one bad value each (row 0 stays clean); a large batch also rows 33 and M - 1.
std::vector<Poison> poisons(int64_t M) {
  std::vector<Poison> p{{1, kNaN}, {2, -kInf}, {3, kInf}};
  if (M > 34) p.insert(p.end(), {{33, kNaN}, {M - 1, kInf}});
  return p;
}

const DLDataType kDtypes[] = {{kDLFloat, 32, 1}, {kDLFloat, 16, 1}, {kDLBfloat, 16, 1}};

// Runs `forward` on a clean and on a poisoned copy of the same input and checks each row. The
// clean rows must be bit-identical (`row_bound` 0) or, where a kernel's rounding depends on which
// tokens share an expert (MoE: the bad rows route elsewhere), within `row_bound` relative error
// of the clean run, row by row.
template <class Forward>
void check_rows(const Forward& forward, int64_t M, int64_t K, int64_t N, DLDataType dtype,
                const std::string& what, double row_bound = 0) {
  Mat clean = random_mat(M, K, dtype, 5);
  Mat bad = clean;
  bad.t.data = bad.words.data();
  bad.t.shape = bad.shape;
  std::map<int64_t, float> bad_rows;
  for (const Poison& p : poisons(M)) {
    bad.set(size_t(p.row * K + (p.row * 37) % K), p.value);
    bad_rows[p.row] = p.value;
  }
  Mat y_clean(M, N, dtype), y_bad(M, N, dtype);
  y_clean.poison();
  y_bad.poison();
  forward(clean.t, y_clean.t);
  forward(bad.t, y_bad.t);
  for (int64_t m = 0; m < M; ++m) {
    const bool has_nan = bad_rows.count(m) && std::isnan(bad_rows[m]);
    double diff = 0, norm = 0;
    for (int64_t n = 0; n < N; ++n) {
      const size_t i = size_t(m * N + n);
      ASSERT_TRUE(std::isfinite(y_clean.get(i))) << what << ": clean row " << m;
      if (bad_rows.count(m)) {
        ASSERT_FALSE(std::isfinite(y_bad.get(i))) << what << ": row " << m << " col " << n;
        if (has_nan) {
          ASSERT_TRUE(std::isnan(y_bad.get(i))) << what << ": NaN row " << m;
        }
      } else if (row_bound == 0) {
        ASSERT_EQ(y_bad.get(i), y_clean.get(i)) << what << ": row " << m << " was disturbed";
      } else {
        ASSERT_TRUE(std::isfinite(y_bad.get(i))) << what << ": row " << m << " col " << n;
        diff += (y_bad.get(i) - y_clean.get(i)) * (y_bad.get(i) - y_clean.get(i));
        norm += y_clean.get(i) * y_clean.get(i);
      }
    }
    if (!bad_rows.count(m) && row_bound > 0) {
      ASSERT_LE(std::sqrt(diff / norm), row_bound) << what << ": row " << m << " was disturbed";
    }
  }
}

TEST(NonFinite, LinearRowsCarryNaNAndInfOnEveryBackendModeAndDtype) {
  Checkpoint ckpt = Checkpoint::open(checkpoint());
  std::set<std::string> ran;
  for (const char* backend : {"cpu_amx", "npu_ref", "gpu_ref"}) {
    for (NumericMode mode : {NumericMode::W4A16, NumericMode::W4A8}) {
      Runtime rt(in_tree(backend, mode));
      std::optional<LinearLayer> layer;
      try {
        layer.emplace(rt.linear(ckpt, "model.layers.0.linear"));
      } catch (const Error&) {
        continue;  // this backend has no kernel for the mode
      }
      ran.insert(std::string(backend) + "/" + mode_name(mode));
      for (DLDataType d : kDtypes)
        for (int64_t M : {4, 40})
          check_rows([&](const DLTensor& x, DLTensor& y) { layer->forward(x, y); }, M, 256, 96, d,
                     std::string(backend) + " " + mode_name(mode) + " " + sdk::dtype_name(d) +
                         " M=" + std::to_string(M));
    }
  }
  for (const char* must : {"cpu_amx/w4a16", "cpu_amx/w4a8", "npu_ref/w4a16", "gpu_ref/w4a16"})
    EXPECT_TRUE(ran.count(must)) << must << " did not run";
}

TEST(NonFinite, MoeRowsCarryNaNAndInfOnEveryBackendAndMode) {
  Checkpoint ckpt = Checkpoint::open(checkpoint());
  int ran = 0;
  for (const char* backend : {"cpu_amx", "npu_ref", "gpu_ref"}) {
    for (NumericMode mode : {NumericMode::W4A16, NumericMode::W4A8}) {
      Runtime rt(in_tree(backend, mode));
      std::optional<MoeLayer> moe;
      try {
        moe.emplace(rt.moe(ckpt, "model.layers.1.mlp", {}));
      } catch (const Error&) {
        continue;
      }
      ++ran;
      for (DLDataType d : kDtypes) {
        // Both runs are within the experts kernel's declared bound of the exact result.
        double bound = 0;
        for (const Placement& p : moe->placements())
          bound = std::max(bound, declared_bound(rt, p, d));
        ASSERT_GT(bound, 0);
        for (int64_t M : {4, 40})
          check_rows([&](const DLTensor& x, DLTensor& y) { moe->forward(x, y); }, M, 128, 128, d,
                     std::string("moe ") + backend + " " + mode_name(mode) + " " +
                         sdk::dtype_name(d) + " M=" + std::to_string(M),
                     2 * bound);
      }
    }
  }
  EXPECT_GE(ran, 3);
}

}  // namespace
