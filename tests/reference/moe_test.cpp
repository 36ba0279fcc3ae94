// npu_ref and gpu_ref MoE kernels against the float64 reference: 8 experts top-2 and 64 experts
// top-8, w13 and w2 with different group sizes, routing weights renormalised or raw in
// f32/bf16/f16, ids int32/int64 with -1 slots, token sets that leave experts empty.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernel_runs.hpp"
#include "reference_plugins.hpp"

namespace nibble::test {
namespace {

struct MoeCase {
  std::string name;
  int experts;
  int top_k;
  int64_t K, I;
  int bits;
  int gs13, gs2;
  bool symmetric, act_order;
  int experts_used;  ///< ids are drawn from [0, experts_used): the rest stay empty
  double drop;       ///< probability of a -1 slot
  bool renormalize;
  DLDataType weight_dtype;
  bool ids_int64;
};

void PrintTo(const MoeCase& c, std::ostream* os) { *os << c.name; }

std::vector<MoeCase> cases() {
  return {
      {"e8_top2_b4_asym_g64_w2g128", 8, 2, 128, 128, 4, 64, 128, false, false, 8, 0.0, true,
       sdk::dtype_f32(), false},
      {"e8_top2_b8_asym_g32_w2gch_ragged", 8, 2, 96, 80, 8, 32, -1, false, false, 6, 0.1, false,
       sdk::dtype_bf16(), true},
      {"e8_top2_b8_sym_act_g32_w2g64", 8, 2, 128, 64, 8, 32, 64, true, true, 8, 0.0, false,
       sdk::dtype_f16(), false},
      {"e64_top8_b4_sym_act_g128_w2gch", 64, 8, 128, 128, 4, 128, -1, true, true, 64, 0.0, true,
       sdk::dtype_f32(), true},
      {"e64_top8_b4_asym_g64_w2g32_empty_experts", 64, 8, 128, 128, 4, 64, 32, false, false, 40,
       0.2, false, sdk::dtype_bf16(), true},
  };
}

// Marlin's rules per weight, restated independently of the plugin ("" = accepted).
std::string expected_marlin_refusal(const MoeCase& c) {
  auto one = [&](const char* what, int64_t K, int64_t N, int gs) -> std::string {
    if (N % 64 != 0 || K % 128 != 0 || (c.act_order && !c.symmetric && gs != -1)) return what;
    return "";
  };
  std::string w13 = one("w13", c.K, 2 * c.I, c.gs13);
  return !w13.empty() ? w13 : one("w2", c.I, c.K, c.gs2);
}

class ReferenceMoe : public ReferencePluginsTest<::testing::TestWithParam<MoeCase>> {};

TEST_P(ReferenceMoe, MatchesFloat64OrRefusesWithReason) {
  const MoeCase& c = GetParam();
  const TestExperts ex =
      random_experts(c.experts, c.K, c.I, c.bits, c.gs13, c.gs2, c.symmetric, c.act_order, 5);
  const nibble_layer_desc d = moe_desc(ex, c.top_k, c.name.c_str());
  ASSERT_EQ(d.group_size, c.gs13);
  ASSERT_EQ(d.w2_group_size, c.gs2);

  std::vector<const nibble_kernel*> running;
  std::vector<std::unique_ptr<PreparedLayer>> prepared;
  for (const nibble_kernel* k :
       {npu->kernel("moe_antiquant"), gpu->kernel("moe_marlin"), gpu->kernel("moe_exllama")}) {
    ASSERT_NE(k, nullptr);
    const std::string why = why_not(k, d);
    const std::string expected =
        std::string(k->name) == "moe_marlin" ? expected_marlin_refusal(c) : "";
    if (!expected.empty()) {
      EXPECT_EQ(why.rfind(expected + ":", 0), 0u) << k->name << " said '" << why << "'";
      continue;
    }
    ASSERT_EQ(why, "") << k->name;
    PrepareResult p = try_prepare_moe(k, d, ex);
    ASSERT_EQ(p.status, NIBBLE_OK) << k->name << ": " << p.message;
    prepared.push_back(std::move(p.layer));
    running.push_back(k);
  }

  uint32_t seed = 900;
  for (int64_t M : {1, 7, 33})
    for (DLDataType dt : {sdk::dtype_f32(), sdk::dtype_bf16(), sdk::dtype_f16()}) {
      const Routing routing =
          random_routing(M, c.top_k, c.experts_used, c.drop, c.renormalize, c.weight_dtype, ++seed);
      const Activations x = random_activations(M, c.K, dt, ++seed);
      const std::vector<double> ref =
          reference_moe(ex, x.values, M, c.top_k, routing.ids, routing.weights);
      for (size_t i = 0; i < running.size(); ++i) {
        const CaseResult r = run_moe(*prepared[i], x, routing, c.ids_int64, ref);
        ASSERT_EQ(r.status, NIBBLE_OK) << running[i]->name << ": " << r.message;
        EXPECT_EQ(r.not_finite, 0u) << running[i]->name << " M=" << M << " " << act_name(dt);
        EXPECT_LE(r.rel_error, declared_bound(running[i], dt))
            << running[i]->name << " M=" << M << " " << act_name(dt);
      }
    }
}

INSTANTIATE_TEST_SUITE_P(Reference, ReferenceMoe, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<MoeCase>& i) { return i.param.name; });

// A token routed to no expert gets exactly 0 (written, not left poisoned); the others still
// match the reference; experts with no token are simply skipped.
TEST(ReferenceMoeRouting, TokensWithoutExpertGiveZero) {
  HarnessPlugin npu("npu_ref"), gpu("gpu_ref");
  const TestExperts ex = random_experts(8, 128, 64, 4, 64, 32, false, false, 9);
  const nibble_layer_desc d = moe_desc(ex, 2);
  Routing routing = random_routing(5, 2, 3, 0.0, true, sdk::dtype_f32(), 10);
  routing.ids[0] = routing.ids[1] = -1;  // token 0: no expert at all
  routing.ids[5] = -1;                   // token 2: one slot empty
  const Activations x = random_activations(5, 128, sdk::dtype_f16(), 11);
  const std::vector<double> ref = reference_moe(ex, x.values, 5, 2, routing.ids, routing.weights);
  for (const nibble_kernel* k : {npu.kernel("moe_antiquant"), gpu.kernel("moe_exllama")}) {
    auto layer = prepare_moe(k, d, ex);
    const CaseResult r = run_moe(*layer, x, routing, false, ref);
    ASSERT_EQ(r.status, NIBBLE_OK) << r.message;
    EXPECT_EQ(r.not_finite, 0u);
    for (int64_t i = 0; i < 128; ++i) EXPECT_EQ(r.y[size_t(i)], 0.0) << k->name;
    EXPECT_LE(r.rel_error, declared_bound(k, sdk::dtype_f16())) << k->name;
  }
}

// The routing weight multiplies the expert's output (after the down projection), so doubling
// every weight doubles y exactly in f32.
TEST(ReferenceMoeRouting, RoutingWeightScalesTheExpertOutput) {
  HarnessPlugin npu("npu_ref");
  const TestExperts ex = random_experts(4, 128, 64, 8, 32, -1, true, false, 12);
  const nibble_layer_desc d = moe_desc(ex, 2);
  const nibble_kernel* k = npu.kernel("moe_antiquant");
  auto layer = prepare_moe(k, d, ex);
  Routing once = random_routing(3, 2, 4, 0.0, false, sdk::dtype_f32(), 13);
  Routing twice = once;
  for (double& w : twice.weights) w *= 2;
  const Activations x = random_activations(3, 128, sdk::dtype_f32(), 14);
  const CaseResult a =
      run_moe(*layer, x, once, false, reference_moe(ex, x.values, 3, 2, once.ids, once.weights));
  const CaseResult b =
      run_moe(*layer, x, twice, false, reference_moe(ex, x.values, 3, 2, twice.ids, twice.weights));
  ASSERT_EQ(a.status, NIBBLE_OK);
  ASSERT_EQ(b.status, NIBBLE_OK);
  for (size_t i = 0; i < a.y.size(); ++i) EXPECT_EQ(b.y[i], 2 * a.y[i]);
  EXPECT_LE(a.rel_error, 1e-5);
}

}  // namespace
}  // namespace nibble::test
