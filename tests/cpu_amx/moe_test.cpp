// cpu_amx MoE kernels (moe_a16, moe_a8) against the float64 reference: GPTQ-like experts (4/8 bit,
// sym/asym with GPTQ v1's zero 16, act-order, per-channel groups, f16/bf16/f32 scales, w13 and w2
// with different group sizes) and AWQ-like ones; E ∈ {8, 64}, top-k ∈ {1, 2, 8}, M ∈ {1, 3, 17,
// 200}; skewed routing (every token to one expert), experts with no token, ids of -1, int32 and
// int64 ids, f32/bf16/f16 activations and routing weights; outputs NaN-poisoned and every element
// checked; at every ISA level this machine has (NIBBLE_MAX_ISA) plus the AMX tiles forced down to
// M = 1; bit-identical results for 1, 2 and 3 threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <map>

#include "cpu_amx_test_util.hpp"
#include "kernel_runs.hpp"

namespace nibble::test {
namespace {

struct ExpertScheme {
  const char* name;
  int bits, group13, group2;
  bool sym, act_order, zero16;
  DLDataType scales;
};

// GPTQ-like and AWQ-like expert sets (AWQ: asymmetric, g128, no act-order, f16 scales).
const std::vector<ExpertScheme>& schemes() {
  static const std::vector<ExpertScheme> all = {
      {"gptq_w4_sym_g128", 4, 128, 128, true, false, false, sdk::dtype_f16()},
      {"gptq_w4_asym_act_g64_g32_z16", 4, 64, 32, false, true, true, sdk::dtype_f16()},
      {"gptq_w4_asym_perchannel_bf16", 4, -1, -1, false, false, true, sdk::dtype_bf16()},
      {"awq_w4_asym_g128_g64", 4, 128, 64, false, false, false, sdk::dtype_f16()},
      {"gptq_w8_asym_g32_perchannel_f32", 8, 32, -1, false, false, false, sdk::dtype_f32()},
      {"gptq_w8_sym_act_g64", 8, 64, 64, true, true, false, sdk::dtype_f16()},
  };
  return all;
}

// Experts drawn like random_experts, but with the scheme's scale dtype and v1 zeros.
TestExperts make_experts(const ExpertScheme& s, int E, int64_t K, int64_t I, uint32_t seed) {
  TestExperts ex;
  ex.K = K;
  ex.I = I;
  for (int e = 0; e < E; ++e) {
    QuantSpec a{K,           2 * I, s.bits,   s.group13, s.sym,
                s.act_order, false, s.zero16, s.scales,  seed * 1000u + uint32_t(2 * e)};
    QuantSpec b{I,           K,     s.bits,   s.group2, s.sym,
                s.act_order, false, s.zero16, s.scales, seed * 1000u + uint32_t(2 * e + 1)};
    ex.w13.push_back(random_weight(a));
    ex.w2.push_back(random_weight(b));
  }
  return ex;
}

// Every (token, slot) to expert `hot`: the skewed case one hot expert must not serialise.
Routing all_to_one_expert(int64_t M, int top_k, int hot, DLDataType weight_dtype) {
  Routing r;
  r.M = M;
  r.top_k = top_k;
  r.weight_dtype = weight_dtype;
  for (int64_t m = 0; m < M; ++m)
    for (int j = 0; j < top_k; ++j) {
      r.ids.push_back(j == 0 ? hot : -1);
      uint8_t buf[4];
      sdk::store_float(buf, weight_dtype, 0, j == 0 ? 0.75f : 0.f);
      r.weights.push_back(sdk::load_float(buf, weight_dtype, 0));
    }
  return r;
}

struct MoeCase {
  int E, top_k;
  int64_t M;
  int experts_used;  ///< routing draws from [0, experts_used): the rest get no token
  double drop;       ///< probability of an id of -1
  bool skewed;       ///< every token to one expert instead
};

const MoeCase kCases[] = {
    {8, 2, 1, 8, 0.0, false},     {8, 2, 3, 8, 0.2, false},    {8, 1, 17, 3, 0.3, false},
    {64, 8, 3, 64, 0.1, false},   {64, 8, 17, 20, 0.0, false}, {8, 2, 200, 8, 0.05, false},
    {64, 1, 200, 64, 0.0, false}, {8, 2, 200, 8, 0.0, true},   {64, 8, 17, 64, 0.0, true},
};

const DLDataType kActs[] = {sdk::dtype_f32(), sdk::dtype_bf16(), sdk::dtype_f16()};

const char* kernel_name(int mode) { return mode == NIBBLE_MODE_W4A16 ? "moe_a16" : "moe_a8"; }

nibble_layer_desc desc_for(const TestExperts& ex, int top_k, int mode) {
  nibble_layer_desc d = moe_desc(ex, top_k);
  d.numeric_mode = mode;
  return d;
}

// A cpu_amx that does not declare the MoE kernel named skips these tests with a message (every
// build here declares both; the guard keeps a failure to register them readable).
#define SKIP_UNLESS_DECLARED(kernel, name)         \
  if (!(kernel))                                   \
  GTEST_SKIP() << "cpu_amx declares no " << (name) \
               << " (the MoE kernels are not registered in plugins/cpu_amx/backend.cpp)"

class CpuAmxMoe : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(CpuAmxMoe, MatchesFloat64OnEverySchemeAndRouting) {
  const auto [param, mode] = GetParam();
  IsaSetting setting(param);
  if (!setting.available()) GTEST_SKIP() << param << " is not available on this machine";
  ASSERT_EQ(probed_isa(), setting.isa);
  const nibble_kernel* k = cpu_amx().kernel(kernel_name(mode));
  SKIP_UNLESS_DECLARED(k, kernel_name(mode));
  std::map<std::string, double> worst;  // per activation dtype
  uint32_t seed = 7;
  for (size_t si = 0; si < schemes().size(); ++si) {
    const ExpertScheme& s = schemes()[si];
    // Ragged on purpose for half the schemes: K and I not multiples of the groups or of 32. I = 72
    // (not a multiple of 16) takes the w13 path without interleaved gate/up panels.
    const int64_t K = si % 2 ? 160 : 128, I = si % 2 ? 96 : (si % 4 == 2 ? 72 : 64);
    std::map<int, TestExperts> experts;                                    // by E
    std::map<std::pair<int, int>, std::unique_ptr<PreparedLayer>> layers;  // by (E, top_k)
    for (size_t ci = 0; ci < std::size(kCases); ++ci) {
      const MoeCase& c = kCases[ci];
      if (!experts.count(c.E)) experts[c.E] = make_experts(s, c.E, K, I, uint32_t(si + 1));
      const TestExperts& ex = experts[c.E];
      auto& layer = layers[{c.E, c.top_k}];
      if (!layer) {
        const nibble_layer_desc d = desc_for(ex, c.top_k, mode);
        ASSERT_EQ(why_not(k, d), "") << s.name;
        layer = prepare_moe(k, d, ex);
      }
      const DLDataType act = kActs[(si + ci) % 3];
      const DLDataType wdt = kActs[(si + 2 * ci) % 3];
      const Activations x = random_activations(c.M, K, act, ++seed);
      const Routing routing =
          c.skewed ? all_to_one_expert(c.M, c.top_k, c.E - 1, wdt)
                   : random_routing(c.M, c.top_k, c.experts_used, c.drop, ci % 2 == 0, wdt, ++seed);
      const std::vector<double> ref =
          reference_moe(ex, x.values, c.M, c.top_k, routing.ids, routing.weights);
      const CaseResult r = run_moe(*layer, x, routing, ci % 2 == 1, ref, 2);
      const std::string what = std::string(s.name) + " E=" + std::to_string(c.E) +
                               " top_k=" + std::to_string(c.top_k) + " M=" + std::to_string(c.M) +
                               " x " + act_name(act) + (c.skewed ? " skewed" : "");
      ASSERT_EQ(r.status, NIBBLE_OK) << what << ": " << r.message;
      EXPECT_EQ(r.not_finite, 0u) << what << ": elements left poisoned or not finite";
      EXPECT_LE(r.rel_error, declared_bound(k, act)) << what;
      // A token whose slots are all -1 gets exactly 0.
      for (int64_t m = 0; m < c.M; ++m) {
        bool none = true;
        for (int j = 0; j < c.top_k; ++j) none = none && routing.ids[size_t(m * c.top_k + j)] < 0;
        if (!none) continue;
        for (int64_t kk = 0; kk < K; ++kk)
          ASSERT_EQ(r.y[size_t(m * K + kk)], 0.0) << what << " token " << m;
      }
      if (std::getenv("MOE_TEST_VERBOSE")) std::cout << what << " err " << r.rel_error << "\n";
      double& w = worst[act_name(act)];
      w = std::max(w, r.rel_error);
    }
  }
  for (const auto& [dtype, err] : worst) {
    std::cout << "[ worst ] " << kernel_name(mode) << " " << param << " x " << dtype << ": " << err
              << "\n";
    RecordProperty("worst_relative_error_" + dtype, std::to_string(err));
  }
}

TEST_P(CpuAmxMoe, BitIdenticalForOneTwoAndThreeThreads) {
  const auto [param, mode] = GetParam();
  IsaSetting setting(param);
  if (!setting.available()) GTEST_SKIP() << param << " is not available on this machine";
  const nibble_kernel* k = cpu_amx().kernel(kernel_name(mode));
  SKIP_UNLESS_DECLARED(k, kernel_name(mode));
  const ExpertScheme& s = schemes()[1];
  const TestExperts ex = make_experts(s, 8, 128, 96, 11);
  // top-k 4: a sum of more than two slots would change with its order.
  auto layer = prepare_moe(k, desc_for(ex, 4, mode), ex);
  for (int64_t M : {1, 17, 200}) {
    // f32 out: a bf16 output's rounding would hide fp32 differences.
    const Activations x = random_activations(M, 128, sdk::dtype_f32(), 21);
    const Routing routing = random_routing(M, 4, 8, 0.1, true, sdk::dtype_f32(), 22);
    const std::vector<double> unused;
    const CaseResult one = run_moe(*layer, x, routing, false, unused, 1);
    ASSERT_EQ(one.status, NIBBLE_OK) << one.message;
    ASSERT_EQ(one.not_finite, 0u);
    for (int threads : {2, 3}) {
      const CaseResult many = run_moe(*layer, x, routing, false, unused, threads);
      ASSERT_EQ(many.status, NIBBLE_OK) << many.message;
      for (size_t i = 0; i < one.y.size(); ++i)
        ASSERT_EQ(std::memcmp(&one.y[i], &many.y[i], sizeof(double)), 0)
            << "M=" << M << " threads " << threads << " element " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(IsaAndMode, CpuAmxMoe, isa_and_mode_values(), isa_and_mode_name);

// The checkpoint's packed bytes of one expert weight (4/8-bit codes, f16 scales, packed zeros,
// g_idx).
double checkpoint_bytes_of(const CanonicalWeight& w) {
  const double G = double(w.num_groups), K = double(w.K), N = double(w.N);
  return K * N * w.bits / 8 + G * N * 2 + G * N * w.bits / 8 + (w.g_idx.empty() ? 0 : 4 * K);
}

TEST(CpuAmxMoeLayout, PreparedBytesStayWithin105PercentOfTheCheckpoint) {
  const nibble_kernel* k = cpu_amx().kernel("moe_a16");
  SKIP_UNLESS_DECLARED(k, "moe_a16");
  for (int bits : {4, 8})
    for (int group : {32, 64, 128, -1})
      for (bool sym : {true, false})
        for (bool act : {false, true}) {
          if (act && group == -1) continue;
          const ExpertScheme s{"size", bits, group, group, sym, act, false, sdk::dtype_f16()};
          const TestExperts ex = make_experts(s, 4, 1024, 512, 3);
          auto layer = prepare_moe(k, desc_for(ex, 2, NIBBLE_MODE_W4A16), ex);
          double ckpt = 0;
          for (size_t e = 0; e < ex.w13.size(); ++e)
            ckpt += checkpoint_bytes_of(ex.w13[e]) + checkpoint_bytes_of(ex.w2[e]);
          EXPECT_LE(double(layer->bytes()), 1.05 * ckpt)
              << "bits " << bits << " group " << group << (sym ? " sym" : " asym")
              << (act ? " act" : "");
          EXPECT_GT(double(layer->bytes()), 0.9 * ckpt);  // the experts are really held
        }
}

// The largest routing the issue names: 256 experts, top-16, on this machine's best ISA level, in
// both modes, with most experts getting no token at M = 1 and most getting one at M = 40.
TEST(CpuAmxMoeScale, TwoHundredFiftySixExpertsTopSixteen) {
  const ExpertScheme& s = schemes()[3];  // AWQ-like, w13 g128 / w2 g64
  const TestExperts ex = make_experts(s, 256, 128, 64, 31);
  for (int mode : {NIBBLE_MODE_W4A16, NIBBLE_MODE_W4A8}) {
    const nibble_kernel* k = cpu_amx().kernel(kernel_name(mode));
    SKIP_UNLESS_DECLARED(k, kernel_name(mode));
    const nibble_layer_desc d = desc_for(ex, 16, mode);
    ASSERT_EQ(why_not(k, d), "");
    auto layer = prepare_moe(k, d, ex);
    for (int64_t M : {1, 40}) {
      const Activations x = random_activations(M, 128, sdk::dtype_bf16(), uint32_t(40 + M));
      const Routing routing =
          random_routing(M, 16, 256, 0.0, true, sdk::dtype_f32(), uint32_t(50 + M));
      const std::vector<double> ref =
          reference_moe(ex, x.values, M, 16, routing.ids, routing.weights);
      const CaseResult r = run_moe(*layer, x, routing, false, ref, 2);
      ASSERT_EQ(r.status, NIBBLE_OK) << r.message;
      EXPECT_EQ(r.not_finite, 0u) << "M=" << M;
      EXPECT_LE(r.rel_error, declared_bound(k, sdk::dtype_bf16()))
          << kernel_name(mode) << " M=" << M;
    }
  }
}

TEST(CpuAmxMoeLayout, RefusesWhatItCannotComputeAndSaysWhy) {
  const TestExperts ex = make_experts(schemes()[0], 2, 128, 64, 5);
  for (int mode : {int(NIBBLE_MODE_W4A16), int(NIBBLE_MODE_W4A8)}) {
    const nibble_kernel* k = cpu_amx().kernel(kernel_name(mode));
    SKIP_UNLESS_DECLARED(k, kernel_name(mode));
    EXPECT_EQ(k->op, NIBBLE_OP_MOE);
    nibble_layer_desc d = desc_for(ex, 2, mode);
    EXPECT_EQ(why_not(k, d), "");
    nibble_layer_desc other_mode = d;
    other_mode.numeric_mode = mode == NIBBLE_MODE_W4A16 ? NIBBLE_MODE_W4A8 : NIBBLE_MODE_W4A16;
    EXPECT_NE(why_not(k, other_mode), "");
    nibble_layer_desc w2_group = d;
    w2_group.w2_group_size = 48;
    EXPECT_NE(why_not(k, w2_group).find("w2"), std::string::npos);
    nibble_layer_desc w13_group = d;
    w13_group.group_size = 40;
    EXPECT_NE(why_not(k, w13_group).find("w13"), std::string::npos);
    nibble_layer_desc gelu = d;
    gelu.activation = 2;
    EXPECT_NE(why_not(k, gelu), "");
    nibble_layer_desc no_topk = d;
    no_topk.top_k = 0;
    EXPECT_NE(why_not(k, no_topk), "");
    nibble_layer_desc linear = d;
    linear.op = NIBBLE_OP_LINEAR;
    EXPECT_NE(why_not(k, linear), "");
  }
}

}  // namespace
}  // namespace nibble::test
