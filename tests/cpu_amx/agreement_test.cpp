// cpu_amx agrees with the reference backends (npu_ref, gpu_ref) on random layers: for every kernel
// of theirs that implements the layer in the same numeric mode, ‖y_amx − y_ref‖/‖y_ref‖ stays
// within the two kernels' declared bounds added (each is bounded against float64).
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <memory>

#include "cpu_amx_test_util.hpp"

namespace nibble::test {
namespace {

double bound_of(const nibble_kernel* k, DLDataType t) {
  if (t.bits == 32) return k->error_bound_f32;
  return t.code == kDLBfloat ? k->error_bound_bf16 : k->error_bound_f16;
}

TEST(CpuAmxAgreement, MatchesTheReferenceBackends) {
  int compared = 0;
  for (const char* other_name : {"npu_ref", "gpu_ref"}) {
    const std::string path = plugin_build_dir() + "/libnibble_" + other_name + ".so";
    if (!std::filesystem::exists(path)) continue;
    static std::map<std::string, std::unique_ptr<HarnessPlugin>> loaded;
    auto& other = loaded[other_name];
    if (!other) other = std::make_unique<HarnessPlugin>(other_name);
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
      for (int mode : {int(NIBBLE_MODE_WEIGHT_ONLY), int(NIBBLE_MODE_DYNAMIC_INT8)}) {
        QuantSpec spec{c.K,   c.N,  c.bits, c.group,          c.sym,
                       c.act, true, false,  sdk::dtype_f16(), ++seed};
        TestWeight w = random_weight(spec);
        nibble_layer_desc d = desc_for(w, mode);
        const nibble_kernel* mine =
            cpu_amx().kernel(mode == NIBBLE_MODE_WEIGHT_ONLY ? "linear_a16" : "linear_a8");
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

}  // namespace
}  // namespace nibble::test
