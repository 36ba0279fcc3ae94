// The SDK's host layer: the MoE descriptor claims symmetry and zero points only from every expert,
// one status check with the plugin's message, escaped exceptions named, one set of CPU devices.
#include <nibble/sdk/device.hpp>
#include <nibble/sdk/host.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "reference.hpp"

namespace nibble::test {
namespace {

namespace host = sdk::host;

TEST(HostLayer, MoeDescriptorIsSymmetricOnlyWhenEveryExpertIs) {
  TestExperts ex = random_experts(3, 64, 32, 4, 32, 32, /*symmetric=*/true, false, 5);
  const host::ExpertViews all = expert_views(ex);
  const host::MoeShape shape{ex.K, ex.I, 3, 2};
  nibble_layer_desc d = host::moe_desc(shape, all.w13(), all.w2(), "moe");
  EXPECT_EQ(d.symmetric, 1);
  EXPECT_EQ(d.w2_symmetric, 1);
  EXPECT_EQ(d.max_zero, 8);

  // One expert with an asymmetric zero makes the block asymmetric, even if expert 0 is symmetric.
  ex.w13[2].zeros[0] = 3;
  ex.w2[1].zeros[0] = 15;
  const host::ExpertViews changed = expert_views(ex);
  d = host::moe_desc(shape, changed.w13(), changed.w2(), "moe");
  EXPECT_EQ(d.symmetric, 0);
  EXPECT_EQ(d.w2_symmetric, 0);
  EXPECT_EQ(d.w2_max_zero, 15);

  // Expert 0 alone (what a host that decodes on demand has) promises nothing.
  ex = random_experts(3, 64, 32, 4, 32, 32, true, false, 5);
  const host::ExpertViews first = expert_views(ex);
  d = host::moe_desc(shape, {first.w13()[0]}, {first.w2()[0]}, "moe");
  EXPECT_EQ(d.symmetric, 0);
  EXPECT_EQ(d.w2_symmetric, 0);
  EXPECT_EQ(d.max_zero, 0);
  EXPECT_EQ(d.w2_max_zero, 0);
  EXPECT_EQ(d.num_experts, 3);
}

TEST(HostLayer, ExpertViewsReportAnExpertNeverGivenBack) {
  const TestExperts ex = random_experts(2, 64, 32, 4, 32, 32, false, false, 6);
  host::ExpertViews views = expert_views(ex);
  const nibble_moe_source& src = views.source();
  nibble_canonical_weight a{}, b{};
  ASSERT_EQ(src.get_expert(src.ctx, 1, &a, &b, nullptr), NIBBLE_OK);
  EXPECT_EQ(a.q, ex.w13[1].q.data());
  EXPECT_NE(views.misuse().find("expert 1 was taken"), std::string::npos) << views.misuse();
  src.put_expert(src.ctx, 1);
  EXPECT_EQ(views.misuse(), "");
  host::ErrorBuffer err;
  EXPECT_EQ(src.get_expert(src.ctx, 2, &a, &b, err.get()), NIBBLE_INVALID_ARGUMENT);
  EXPECT_NE(views.misuse().find("get_expert(2) is out of range"), std::string::npos);
}

TEST(HostLayer, CheckCarriesStatusCallAndMessage) {
  host::ErrorBuffer err;
  std::snprintf(err.error.message, sizeof err.error.message, "K must be even");
  try {
    host::check(NIBBLE_UNSUPPORTED, "prepare", err);
    FAIL() << "check did not throw";
  } catch (const host::CallError& e) {
    EXPECT_EQ(e.status(), NIBBLE_UNSUPPORTED);
    EXPECT_EQ(e.call(), "prepare");
    EXPECT_EQ(e.message(), "K must be even");
    EXPECT_EQ(std::string(e.what()), "prepare failed (unsupported): K must be even");
    EXPECT_FALSE(e.escaped());
  }
  EXPECT_NO_THROW(host::check(NIBBLE_OK, "prepare", err));
}

TEST(HostLayer, AnExceptionCrossingTheAbiBecomesAnEscapedError) {
  const nibble_status s = host::status_of(
      [] { host::guard("forward", []() -> nibble_status { throw std::runtime_error("boom"); }); });
  EXPECT_EQ(s, NIBBLE_INTERNAL);
  try {
    host::guard("forward", [] { throw std::runtime_error("boom"); });
    FAIL() << "guard let the exception through unchanged";
  } catch (const host::CallError& e) {
    EXPECT_TRUE(e.escaped());
    EXPECT_NE(e.message().find("forward threw a C++ exception across the C ABI: boom"),
              std::string::npos);
  }
}

TEST(HostLayer, StatusNamesAreDistinct) {
  std::set<std::string> names;
  for (nibble_status s : {NIBBLE_OK, NIBBLE_INVALID_ARGUMENT, NIBBLE_UNSUPPORTED,
                          NIBBLE_OUT_OF_MEMORY, NIBBLE_UNAVAILABLE, NIBBLE_INTERNAL})
    names.insert(nibble_status_name(s));
  EXPECT_EQ(names.size(), 6u);
  EXPECT_EQ(names.count("unknown status"), 0u);
  EXPECT_STREQ(nibble_status_name(99), "unknown status");
}

TEST(HostLayer, CpuMemoryIsHostAndPinnedHostMemory) {
  EXPECT_TRUE(sdk::is_cpu_memory(DLDevice{kDLCPU, 0}));
  EXPECT_TRUE(sdk::is_cpu_memory(DLDevice{kDLCUDAHost, 0}));
  EXPECT_TRUE(sdk::is_cpu_memory(DLDevice{kDLROCMHost, 0}));
  EXPECT_FALSE(sdk::is_cpu_memory(DLDevice{kDLCUDA, 0}));
  EXPECT_FALSE(sdk::is_cpu_memory(DLDevice{kDLCUDAManaged, 0}));
}

TEST(HostLayer, LinearDescriptorReadsTheWeight) {
  QuantSpec spec;
  spec.K = 64;
  spec.N = 16;
  spec.group_size = 32;
  spec.act_order = true;
  spec.bias = true;
  spec.v1_zero16 = true;
  const CanonicalWeight w = random_weight(spec);
  const nibble_layer_desc d = host::linear_desc(w.view(), "l", NIBBLE_MODE_W4A8);
  EXPECT_EQ(d.struct_size, sizeof d);
  EXPECT_EQ(d.K, 64);
  EXPECT_EQ(d.N, 16);
  EXPECT_EQ(d.has_g_idx, 1);
  EXPECT_EQ(d.has_bias, 1);
  EXPECT_EQ(d.symmetric, 0);
  EXPECT_EQ(d.numeric_mode, NIBBLE_MODE_W4A8);
  EXPECT_EQ(d.max_zero, *std::max_element(w.zeros.begin(), w.zeros.end()));
}

}  // namespace
}  // namespace nibble::test
