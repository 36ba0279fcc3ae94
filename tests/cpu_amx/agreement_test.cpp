// cpu_amx agrees with the reference backends (npu_ref, gpu_ref) on random linear layers and MoE
// blocks: for every kernel
// of theirs that implements the layer in the same numeric mode, ‖y_amx − y_ref‖/‖y_ref‖ stays
// within the two kernels' declared bounds added (each is bounded against float64).
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <memory>

#include "cpu_amx_test_util.hpp"
#include "kernel_runs.hpp"

namespace nibble::test {
namespace {

// A reference plugin built next to cpu_amx, loaded once for the process (null when not built).
HarnessPlugin* reference_plugin(const char* name) {
  static std::map<std::string, std::unique_ptr<HarnessPlugin>> loaded;
  auto& p = loaded[name];
  if (!p && std::filesystem::exists(plugin_build_dir() + "/libnibble_" + name + ".so"))
    p = std::make_unique<HarnessPlugin>(name);
  return p.get();
}

double bound_of(const nibble_kernel* k, DLDataType t) {
  if (t.bits == 32) return k->error_bound_f32;
  return t.code == kDLBfloat ? k->error_bound_bf16 : k->error_bound_f16;
}

TEST(CpuAmxAgreement, MatchesTheReferenceBackends) {
  int compared = 0;
  for (const char* other_name : {"npu_ref", "gpu_ref"}) {
    HarnessPlugin* other = reference_plugin(other_name);
    if (!other) continue;
    struct Case {
      int bits, group;
      bool sym, act;
      int64_t K, N, M;
      DLDataType act_dtype;
    };
    const Case cases[] = {{4, 128, true, false, 512, 128, 1, sdk::dtype_f16()},
                          {4, 128, false, false, 256, 64, 7, sdk::dtype_bf16()},
                          {4, 64, false, true, 256, 96, 33, sdk::dtype_f32()},
                          {4, -1, true, false, 384, 64, 4, sdk::dtype_f16()},
                          {8, 128, false, false, 256, 64, 17, sdk::dtype_bf16()}};
    uint32_t seed = 41;
    for (const Case& c : cases)
      for (int mode : {int(NIBBLE_MODE_W4A16), int(NIBBLE_MODE_W4A8)}) {
        QuantSpec spec{c.K,   c.N,  c.bits, c.group,          c.sym,
                       c.act, true, false,  sdk::dtype_f16(), ++seed};
        CanonicalWeight w = random_weight(spec);
        nibble_layer_desc d = desc_for(w, mode);
        const nibble_kernel* mine =
            cpu_amx().kernel(mode == NIBBLE_MODE_W4A16 ? "linear_a16" : "linear_a8");
        auto my_layer = prepare_linear(mine, d, w);
        Activations x = random_activations(c.M, c.K, c.act_dtype, ++seed);
        LinearResult mine_y = run_linear(*my_layer, x, c.N);
        ASSERT_EQ(mine_y.status, NIBBLE_OK) << mine_y.message;
        for (const nibble_kernel* k : other->kernels(NIBBLE_OP_LINEAR)) {
          if (k->numeric_mode != mode || !why_not(k, d).empty()) continue;
          auto their_layer = prepare_linear(k, d, w);
          LinearResult theirs = run_linear(*their_layer, x, c.N);
          ASSERT_EQ(theirs.status, NIBBLE_OK)
              << other_name << "/" << k->name << ": " << theirs.message;
          const double diff = relative_error(mine_y.values, theirs.values);
          EXPECT_LE(diff, bound_of(mine, c.act_dtype) + bound_of(k, c.act_dtype))
              << other_name << "/" << k->name << " bits " << c.bits << " group " << c.group
              << " M=" << c.M;
          ++compared;
        }
      }
  }
  if (compared == 0) GTEST_SKIP() << "no reference backend built next to cpu_amx";
  RecordProperty("kernels_compared", compared);
}

// The same for MoE blocks: cpu_amx's fused kernels against every reference MoE kernel of the same
// numeric mode that takes the experts (GPTQ-like with act-order, AWQ-like; I a multiple of 16
// and not, so both of cpu_amx's w13 layouts), same routing.
TEST(CpuAmxAgreement, MoeMatchesTheReferenceBackends) {
  int compared = 0;
  for (const char* other_name : {"npu_ref", "gpu_ref"}) {
    HarnessPlugin* other = reference_plugin(other_name);
    if (!other) continue;
    struct Case {
      int bits, gs13, gs2;
      bool sym, act;
      int64_t I, M;
      DLDataType act_dtype;
    };
    const Case cases[] = {{4, 128, 64, false, false, 128, 1, sdk::dtype_bf16()},
                          {4, 64, 64, true, true, 72, 17, sdk::dtype_f32()},
                          {8, 128, 128, false, false, 96, 9, sdk::dtype_f16()}};
    uint32_t seed = 71;
    for (const Case& c : cases) {
      const TestExperts ex =
          random_experts(8, 256, c.I, c.bits, c.gs13, c.gs2, c.sym, c.act, ++seed);
      for (int mode : {int(NIBBLE_MODE_W4A16), int(NIBBLE_MODE_W4A8)}) {
        nibble_layer_desc d = moe_desc(ex, 2);
        d.numeric_mode = mode;
        const nibble_kernel* mine =
            cpu_amx().kernel(mode == NIBBLE_MODE_W4A16 ? "moe_a16" : "moe_a8");
        ASSERT_NE(mine, nullptr);
        ASSERT_EQ(why_not(mine, d), "");
        auto my_layer = prepare_moe(mine, d, ex);
        const Activations x = random_activations(c.M, 256, c.act_dtype, ++seed);
        const Routing routing = random_routing(c.M, 2, 8, 0.1, true, sdk::dtype_f32(), ++seed);
        const std::vector<double> unused;
        const CaseResult mine_y = run_moe(*my_layer, x, routing, false, unused);
        ASSERT_EQ(mine_y.status, NIBBLE_OK) << mine_y.message;
        for (const nibble_kernel* k : other->kernels(NIBBLE_OP_MOE)) {
          if (k->numeric_mode != mode || !why_not(k, d).empty()) continue;
          auto their_layer = prepare_moe(k, d, ex);
          const CaseResult theirs = run_moe(*their_layer, x, routing, false, unused);
          ASSERT_EQ(theirs.status, NIBBLE_OK)
              << other_name << "/" << k->name << ": " << theirs.message;
          const double diff = relative_error(mine_y.y, theirs.y);
          EXPECT_LE(diff, bound_of(mine, c.act_dtype) + bound_of(k, c.act_dtype))
              << other_name << "/" << k->name << " bits " << c.bits << " I " << c.I << " M=" << c.M;
          ++compared;
        }
      }
    }
  }
  if (compared == 0) GTEST_SKIP() << "no reference backend built next to cpu_amx";
  RecordProperty("kernels_compared", compared);
}

}  // namespace
}  // namespace nibble::test
