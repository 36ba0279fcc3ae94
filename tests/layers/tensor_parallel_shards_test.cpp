// Tensor-parallel shards cut as engines cut them, built with linear_from_tensors on every
// backend: row-parallel shards (K split) summed, with the bias on one shard, and column-parallel
// shards (N split) concatenated, against the float64 product of the unsharded layer. GPTQ with
// act-order (scales kept whole, g_idx holding global groups, some groups unused by a shard), GPTQ
// without (scales cut along groups, g_idx starting at the shard's first group) and AWQ.
#include <nibble/checkpoint_scheme.hpp>
#include <nibble/error.hpp>
#include <nibble/runtime.hpp>

#include <algorithm>
#include <numeric>
#include <random>
#include <set>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "engine_tensors_util.hpp"
#include "layer_test_util.hpp"

using namespace nibble;
using namespace nibble::test;

namespace {

constexpr int64_t K = 512, N = 256;

enum class Grouping {
  None,            // no act-order, g_idx given as engines pass it (k / group_size)
  ActOrder,        // a random permutation: every shard draws on every group
  ActOrderBlocks,  // groups permuted as blocks: each shard uses a few groups, the rest unused
};

struct Layer {
  SchemeKind kind;
  Grouping grouping;
  int group;
  const char* what;
};

// A random layer: q uniform, zeros symmetric (act-order, as Marlin runs it) or random, scales
// and bias random f16, never zero.
CanonicalWeight random_weight(const Layer& l, uint32_t seed) {
  std::mt19937 rng(seed);
  CanonicalWeight w;
  w.bits = 4;
  w.group_size = l.group;
  w.K = K;
  w.N = N;
  w.num_groups = K / l.group;
  w.scales_dtype = sdk::dtype_f16();
  w.bias_dtype = sdk::dtype_f16();
  std::uniform_int_distribution<int> q(0, 15), z(1, 15);
  std::uniform_real_distribution<float> s(0.002f, 0.03f), b(-1.f, 1.f);
  w.q.resize(size_t(N * K));
  for (auto& v : w.q) v = uint8_t(q(rng));
  w.zeros.resize(size_t(w.num_groups * N));
  for (auto& v : w.zeros) v = uint8_t(l.grouping == Grouping::None ? z(rng) : 8);
  w.scales.resize(size_t(w.num_groups * N) * 2);
  for (int64_t i = 0; i < w.num_groups * N; ++i)
    sdk::store_float(w.scales.data(), w.scales_dtype, size_t(i), s(rng));
  w.bias.resize(size_t(N) * 2);
  for (int64_t n = 0; n < N; ++n) sdk::store_float(w.bias.data(), w.bias_dtype, size_t(n), b(rng));
  if (l.grouping == Grouping::ActOrder) {
    w.g_idx.resize(size_t(K));
    for (int64_t k = 0; k < K; ++k) w.g_idx[size_t(k)] = int32_t(k / l.group);
    std::shuffle(w.g_idx.begin(), w.g_idx.end(), rng);
  } else if (l.grouping == Grouping::ActOrderBlocks) {
    std::vector<int32_t> block(size_t(w.num_groups));
    std::iota(block.begin(), block.end(), 0);
    std::shuffle(block.begin(), block.end(), rng);
    w.g_idx.resize(size_t(K));
    for (int64_t k = 0; k < K; ++k) w.g_idx[size_t(k)] = block[size_t(k / l.group)];
    std::shuffle(w.g_idx.begin(), w.g_idx.begin() + K / 2, rng);  // act-order within a half
    std::shuffle(w.g_idx.begin() + K / 2, w.g_idx.end(), rng);
  }
  return w;
}

// Rows [r0, r1) and columns [c0, c1) of a 2-D tensor, or of a 1-D one's elements [c0, c1).
OwnedTensor cut(const OwnedTensor& t, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  const size_t e = dtype_size(t.dtype);
  if (t.shape.size() == 1) {
    OwnedTensor o = OwnedTensor::zeros(t.dtype, {c1 - c0});
    std::memcpy(o.data.data(), t.data.data() + size_t(c0) * e, size_t(c1 - c0) * e);
    return o;
  }
  const int64_t cols = t.shape[1];
  OwnedTensor o = OwnedTensor::zeros(t.dtype, {r1 - r0, c1 - c0});
  for (int64_t r = r0; r < r1; ++r)
    std::memcpy(o.data.data() + size_t((r - r0) * (c1 - c0)) * e,
                t.data.data() + size_t(r * cols + c0) * e, size_t(c1 - c0) * e);
  return o;
}

using Tensors = std::map<std::string, OwnedTensor>;

LentLayer lend(const Tensors& t) {
  LentLayer l;
  for (const auto& [s, o] : t) l[s] = Lent::of(o);
  return l;
}

// Shard r of `tp` along K, as vLLM's GPTQ and AWQ linear methods load a row-parallel layer.
Tensors row_shard(const Tensors& full, const Layer& l, int r, int tp) {
  const int64_t k0 = K * r / tp, k1 = K * (r + 1) / tp, G = K / l.group;
  const bool act_order = l.grouping != Grouping::None;
  Tensors s;
  if (l.kind == SchemeKind::AwqGemm) {
    s["qweight"] = cut(full.at("qweight"), k0, k1, 0, N / 8);
  } else {
    s["qweight"] = cut(full.at("qweight"), k0 / 8, k1 / 8, 0, N);
    s["g_idx"] = cut(full.at("g_idx"), 0, 0, k0, k1);
  }
  const int64_t zcols = full.at("qzeros").shape[1];
  const int64_t g0 = act_order ? 0 : k0 / l.group, g1 = act_order ? G : k1 / l.group;
  s["scales"] = cut(full.at("scales"), g0, g1, 0, N);
  s["qzeros"] = cut(full.at("qzeros"), g0, g1, 0, zcols);
  if (r == 0) s["bias"] = full.at("bias");
  return s;
}

// Shard c of `tp` along N (column-parallel).
Tensors column_shard(const Tensors& full, const Layer& l, int c, int tp) {
  const int64_t n0 = N * c / tp, n1 = N * (c + 1) / tp, G = K / l.group;
  Tensors s;
  if (l.kind == SchemeKind::AwqGemm)
    s["qweight"] = cut(full.at("qweight"), 0, K, n0 / 8, n1 / 8);
  else
    s["qweight"] = cut(full.at("qweight"), 0, K / 8, n0, n1);
  if (full.count("g_idx")) s["g_idx"] = full.at("g_idx");
  s["scales"] = cut(full.at("scales"), 0, G, n0, n1);
  s["qzeros"] = cut(full.at("qzeros"), 0, G, n0 / 8, n1 / 8);
  s["bias"] = cut(full.at("bias"), 0, 0, n0, n1);
  return s;
}

QuantFormat format_for(const Layer& l) {
  QuantFormat f;
  f.method = l.kind == SchemeKind::AwqGemm ? "awq" : "gptq";
  f.checkpoint_format = l.kind == SchemeKind::AwqGemm  ? "gemm"
                        : l.kind == SchemeKind::GptqV2 ? "gptq_v2"
                                                       : "gptq";
  f.bits = 4;
  f.group_size = l.group;
  f.sym = l.grouping != Grouping::None;
  return f;
}

// x's columns [k0, k1), contiguous.
Mat columns(const Mat& x, int64_t k0, int64_t k1) {
  Mat o(x.shape[0], k1 - k0, x.t.dtype);
  for (int64_t m = 0; m < x.shape[0]; ++m)
    for (int64_t k = k0; k < k1; ++k)
      o.set(size_t(m * (k1 - k0) + k - k0), float(x.get(size_t(m * x.shape[1] + k))));
  return o;
}

// float64 product of w's input channels [k0, k1) (the bias when `bias`).
std::vector<double> partial_ref(const CanonicalWeight& w, const Mat& x, int64_t k0, int64_t k1,
                                bool bias) {
  const int64_t M = x.shape[0];
  std::vector<double> y(size_t(M * N));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t m = 0; m < M; ++m) {
      double acc = bias ? w.bias_at(n) : 0.0;
      for (int64_t k = k0; k < k1; ++k) acc += x.get(size_t(m * K + k)) * w.dequant(n, k);
      y[size_t(m * N + n)] = acc;
    }
  return y;
}

double norm(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x * x;
  return std::sqrt(s);
}

struct Case {
  const char* backend;
  NumericMode mode;
};

class ShardsOnBackend : public ::testing::TestWithParam<Case> {};

const Layer kLayers[] = {
    {SchemeKind::GptqV1, Grouping::ActOrder, 64, "GPTQ v1 act-order"},
    {SchemeKind::GptqV1, Grouping::ActOrderBlocks, 64, "GPTQ v1 act-order, unused groups"},
    // A 4-way shard's K (128) spans one group here, though it keeps all four groups' rows.
    {SchemeKind::GptqV1, Grouping::ActOrder, 128, "GPTQ v1 act-order, group 128"},
    {SchemeKind::GptqV2, Grouping::None, 64, "GPTQ v2 without act-order"},
    {SchemeKind::AwqGemm, Grouping::None, 64, "AWQ"},
};

TEST_P(ShardsOnBackend, RowShardsSumAndColumnShardsConcatenateToTheLayer) {
  const Case c = GetParam();
  Runtime rt(in_tree(c.backend, c.mode));
  ASSERT_NE(rt.registry().find(c.backend), nullptr);
  uint32_t seed = 11;
  for (const Layer& l : kLayers) {
    const CanonicalWeight w = random_weight(l, seed++);
    const Tensors full = get_scheme(l.kind).encode(w);
    const QuantFormat f = format_for(l);
    LentLayer lent_full = lend(full);
    ASSERT_TRUE(same_weight(decode_tensors("full", quant_tensors(lent_full), f), w)) << l.what;
    LinearLayer whole = rt.linear_from_tensors("full", quant_tensors(lent_full), f);
    for (DLDataType dt : {sdk::dtype_f32(), sdk::dtype_bf16()}) {
      const double bound = declared_bound(rt, whole.placement(), dt);
      for (int64_t M : {1, 7}) {
        const Mat x = random_mat(M, K, dt, uint32_t(seed + M));
        const std::vector<double> ref = linear_ref(w, x);
        Mat y(M, N, dt);
        y.poison();
        whole.forward(x.t, y.t);
        size_t bad = 0;
        EXPECT_LE(rel_err(y, ref, &bad), bound) << l.what << " unsharded";
        EXPECT_EQ(bad, 0u);
        for (int tp : {2, 4}) {
          // Row-parallel: each shard's error is within the bound of its own product, so the sum's
          // is within the bound of the sum of their norms.
          std::vector<double> sum(size_t(M * N), 0.0);
          double shard_norms = 0;
          for (int r = 0; r < tp; ++r) {
            const int64_t k0 = K * r / tp, k1 = K * (r + 1) / tp;
            LentLayer lent = lend(row_shard(full, l, r, tp));
            const std::string name = "row" + std::to_string(r);
            // The shard decodes to exactly the unsharded weight's channels [k0, k1).
            const CanonicalWeight ws = decode_tensors(name, quant_tensors(lent), f);
            ASSERT_EQ(ws.K, k1 - k0);
            for (int64_t n = 0; n < N; n += 7)
              for (int64_t k = 0; k < ws.K; ++k)
                ASSERT_EQ(ws.dequant(n, k), w.dequant(n, k0 + k)) << l.what << " row " << r;
            LinearLayer shard;
            try {
              shard = rt.linear_from_tensors(name, quant_tensors(lent), f);
            } catch (const Error& e) {
              ADD_FAILURE() << l.what << " tp " << tp << " shard " << r << ": " << e.what();
              continue;
            }
            const Mat xs = columns(x, k0, k1);
            Mat ys(M, N, dt);
            ys.poison();
            shard.forward(xs.t, ys.t);
            for (size_t i = 0; i < sum.size(); ++i) sum[i] += ys.get(i);
            shard_norms += norm(partial_ref(w, x, k0, k1, r == 0));
          }
          double diff = 0;
          size_t non_finite = 0;
          for (size_t i = 0; i < sum.size(); ++i) {
            if (!std::isfinite(sum[i])) ++non_finite;
            diff += (sum[i] - ref[i]) * (sum[i] - ref[i]);
          }
          EXPECT_EQ(non_finite, 0u) << l.what << " tp " << tp;
          EXPECT_LE(std::sqrt(diff), bound * shard_norms)
              << l.what << " row-parallel tp " << tp << " " << sdk::dtype_name(dt) << " M=" << M;
          // Column-parallel: each shard is the layer's outputs [n0, n1).
          Mat cat(M, N, dt);
          cat.poison();
          for (int cidx = 0; cidx < tp; ++cidx) {
            const int64_t n0 = N * cidx / tp, n1 = N * (cidx + 1) / tp;
            LentLayer lent = lend(column_shard(full, l, cidx, tp));
            LinearLayer shard =
                rt.linear_from_tensors("col" + std::to_string(cidx), quant_tensors(lent), f);
            Mat ys(M, n1 - n0, dt);
            ys.poison();
            shard.forward(x.t, ys.t);
            for (int64_t m = 0; m < M; ++m)
              for (int64_t n = n0; n < n1; ++n)
                cat.set(size_t(m * N + n), float(ys.get(size_t(m * (n1 - n0) + n - n0))));
          }
          EXPECT_LE(rel_err(cat, ref, &bad), bound)
              << l.what << " column-parallel tp " << tp << " " << sdk::dtype_name(dt);
          EXPECT_EQ(bad, 0u);
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Backends, ShardsOnBackend,
    ::testing::Values(Case{"npu_ref", NumericMode::W4A16}, Case{"gpu_ref", NumericMode::W4A16},
                      Case{"cpu_amx", NumericMode::W4A16}, Case{"cpu_amx", NumericMode::W4A8}),
    [](const auto& info) {
      return std::string(info.param.backend) + "_" + mode_name(info.param.mode);
    });

TEST(RowShards, ActOrderShardsKeepEveryGroupAndNoActOrderShardsAreRebased) {
  const Layer act{SchemeKind::GptqV1, Grouping::ActOrderBlocks, 64, "act-order"};
  const Tensors act_full = get_scheme(act.kind).encode(random_weight(act, 3));
  LentLayer a = lend(row_shard(act_full, act, 1, 4));
  const CanonicalWeight wa = decode_tensors("act", quant_tensors(a), format_for(act));
  EXPECT_EQ(wa.num_groups, K / act.group);  // all 8 rows kept
  EXPECT_EQ(wa.K, K / 4);
  // Channels were reordered within each half of K, so a quarter uses that half's 4 groups only.
  std::set<int32_t> used(wa.g_idx.begin(), wa.g_idx.end());
  EXPECT_EQ(used.size(), 4u);

  const Layer plain{SchemeKind::GptqV2, Grouping::None, 64, "no act-order"};
  const Tensors plain_full = get_scheme(plain.kind).encode(random_weight(plain, 4));
  LentLayer p = lend(row_shard(plain_full, plain, 3, 4));
  const auto* g = reinterpret_cast<const int32_t*>(p.at("g_idx")->owned.data());
  EXPECT_EQ(g[0], 6);  // global group numbers: shard 3 of 4 starts at group 6
  const CanonicalWeight wp = decode_tensors("plain", quant_tensors(p), format_for(plain));
  EXPECT_EQ(wp.num_groups, 2);
  EXPECT_TRUE(wp.g_idx.empty());  // rebased, it is the identity grouping
}

TEST(RowShards, TheCheckpointPathKeepsItsStrictGroupRows) {
  // The same act-order shard stored as a checkpoint layer: scales must have ceil(K / 64) rows.
  const Layer act{SchemeKind::GptqV1, Grouping::ActOrder, 64, "act-order"};
  const Tensors shard = row_shard(get_scheme(act.kind).encode(random_weight(act, 5)), act, 0, 4);
  std::map<std::string, TensorView> views;
  for (const auto& [s, t] : shard) views[s] = t.view("layer." + s);
  LayerTensors lt;
  lt.prefix = "layer";
  lt.qweight = &views.at("qweight");
  lt.qzeros = &views.at("qzeros");
  lt.scales = &views.at("scales");
  lt.g_idx = &views.at("g_idx");
  try {
    get_scheme(SchemeKind::GptqV1).check(lt, {4, act.group, true});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("expected [2, 256]"));
  }
}

}  // namespace
