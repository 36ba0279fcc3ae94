// Kernel selection: strict names, "auto" by priority among available backends, per-layer
// fallback lists, and the "nothing fits" error that lists every reason.
#include <nibble/error.hpp>
#include <nibble/registry.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "test_dirs.hpp"

using nibble::Registry;
using nibble::test::only_test_plugins;
using ::testing::HasSubstr;

namespace {

nibble_layer_desc linear_desc(int64_t K, const char* name = "model.layers.0.q_proj") {
  nibble_layer_desc d{};
  d.struct_size = sizeof d;
  d.op = NIBBLE_OP_LINEAR;
  d.name = name;
  d.K = K;
  d.N = 32;
  d.bits = 4;
  d.group_size = 32;
  d.numeric_mode = NIBBLE_MODE_W4A16;
  d.act_dtypes = NIBBLE_DTYPE_F32;
  return d;
}

std::string error_of(const Registry& reg, const nibble_layer_desc& d, const std::string& backend) {
  try {
    reg.select(d, backend);
  } catch (const nibble::Error& e) {
    return e.what();
  }
  return "";
}

class Selection : public ::testing::Test {
 protected:
  std::shared_ptr<const Registry> reg =
      Registry::load(only_test_plugins({"alpha", "beta", "gamma", "garbage"}));
};

TEST_F(Selection, AutoFollowsPriorityAmongAvailableBackends) {
  // gamma has the highest priority but is unavailable; alpha (50) beats beta (10) when it can.
  auto s = reg->select(linear_desc(128), "auto");
  EXPECT_EQ(s.kernel->full_name(), "alpha/scalar64");
  EXPECT_TRUE(s.passed_over.empty());
  auto t = reg->select(linear_desc(100), "auto");
  EXPECT_EQ(t.kernel->full_name(), "beta/scalar");
  ASSERT_EQ(t.passed_over.size(), 1u);
  EXPECT_THAT(t.passed_over[0], HasSubstr("alpha/scalar64: K=100 is not a multiple of 64"));
}

TEST_F(Selection, AStrictNameNeverFallsBack) {
  EXPECT_EQ(reg->select(linear_desc(128), "beta").kernel->full_name(), "beta/scalar");
  std::string e = error_of(*reg, linear_desc(100), "alpha");
  EXPECT_THAT(e, HasSubstr("model.layers.0.q_proj"));
  EXPECT_THAT(e, HasSubstr("alpha/scalar64: K=100 is not a multiple of 64"));
}

TEST_F(Selection, AnUnknownBackendNamesTheLoadedOnes) {
  std::string e = error_of(*reg, linear_desc(128), "cuda");
  EXPECT_THAT(e, HasSubstr("backend 'cuda' is not loaded"));
  EXPECT_THAT(e, HasSubstr("alpha"));
  EXPECT_THAT(e, HasSubstr("beta"));
  EXPECT_THAT(e, HasSubstr("libnibble_garbage.so"));
}

TEST_F(Selection, AnUnavailableBackendGivesItsProbeReason) {
  std::string e = error_of(*reg, linear_desc(128), "gamma");
  EXPECT_THAT(e, HasSubstr("no gamma accelerator found"));
}

TEST_F(Selection, AFallbackListIsHonouredPerLayer) {
  auto a = reg->select(linear_desc(128, "layer.a"), "gamma,alpha,beta");
  EXPECT_EQ(a.kernel->full_name(), "alpha/scalar64");
  ASSERT_FALSE(a.passed_over.empty());
  EXPECT_THAT(a.passed_over[0], HasSubstr("gamma is unavailable"));
  auto b = reg->select(linear_desc(96, "layer.b"), "gamma,alpha,beta");
  EXPECT_EQ(b.kernel->full_name(), "beta/scalar");
  auto c = reg->select(linear_desc(96, "layer.c"), "alpha,*");
  EXPECT_EQ(c.kernel->full_name(), "beta/scalar");
}

TEST_F(Selection, NothingFitsListsEveryReason) {
  nibble_layer_desc d = linear_desc(100);
  d.op = NIBBLE_OP_MOE;
  std::string e = error_of(*reg, d, "alpha,beta");
  EXPECT_THAT(e, HasSubstr("no kernel can run layer model.layers.0.q_proj"));
  EXPECT_THAT(e, HasSubstr("backend alpha has no MoE kernel"));
  EXPECT_THAT(e, HasSubstr("backend gamma is unavailable: no gamma accelerator found"));
  EXPECT_THAT(e, HasSubstr("libnibble_garbage.so failed at preflight"));
}

TEST_F(Selection, TheModeMustMatch) {
  nibble_layer_desc d = linear_desc(128);
  d.numeric_mode = NIBBLE_MODE_W4A8;
  std::string e = error_of(*reg, d, "beta");
  EXPECT_THAT(e, HasSubstr("has no quantized linear kernel for mode w4a8"));
}

}  // namespace
