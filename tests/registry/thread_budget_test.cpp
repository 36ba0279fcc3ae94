// Each Runtime's plugins see that Runtime's thread budget, also when several Runtimes with
// different budgets live in one process, and plugins built for older ABI minors still load.
#include <nibble/registry.hpp>
#include <nibble/runtime.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <thread>

#include "test_dirs.hpp"

using nibble::Registry;
using nibble::test::only_test_plugins;
using ::testing::Contains;
using ::testing::HasSubstr;

namespace {

nibble::RuntimeOptions budget_options(int threads) {
  nibble::RuntimeOptions o = only_test_plugins({"budget", "older", "older11"});
  o.threads = threads;
  return o;
}

// What the budget plugin's kernel says about a linear layer now (not at load time).
std::vector<std::string> explain_linear(const Registry& reg) {
  nibble_layer_desc d{};
  d.struct_size = sizeof d;
  d.op = NIBBLE_OP_LINEAR;
  d.name = "probe.layer";
  d.K = 64;
  d.N = 64;
  d.bits = 4;
  d.group_size = 64;
  d.numeric_mode = NIBBLE_MODE_W4A16;
  d.act_dtypes = NIBBLE_DTYPE_F32;
  return reg.explain(d);
}

TEST(ThreadBudget, TwoRuntimesInOneProcessEachGiveTheirPluginsTheirOwnBudget) {
  nibble::Runtime three(budget_options(3));
  nibble::Runtime five(budget_options(5));
  const nibble::BackendInfo* b3 = three.registry().find("budget");
  const nibble::BackendInfo* b5 = five.registry().find("budget");
  ASSERT_NE(b3, nullptr);
  ASSERT_NE(b5, nullptr);
  EXPECT_EQ(b3->probe_detail, "thread budget 3");
  EXPECT_EQ(b5->probe_detail, "thread budget 5");
  // After both loaded: a call into each Runtime's load still reads that Runtime's budget.
  EXPECT_THAT(explain_linear(three.registry()), Contains("budget/report: thread budget 3"));
  EXPECT_THAT(explain_linear(five.registry()), Contains("budget/report: thread budget 5"));
  EXPECT_NE(b3->plugin, b5->plugin) << "a 1.2 plugin is entered once per registry";
}

TEST(ThreadBudget, NoThreadOptionGivesEveryHardwareThread) {
  nibble::Runtime all(budget_options(0));
  const nibble::BackendInfo* b = all.registry().find("budget");
  ASSERT_NE(b, nullptr);
  const int hardware = int(std::max(1u, std::thread::hardware_concurrency()));
  EXPECT_EQ(b->probe_detail, "thread budget " + std::to_string(hardware));
}

TEST(ThreadBudget, PluginsOfOlderMinorsLoadOncePerProcessAndRunInEveryRuntime) {
  nibble::Runtime a(budget_options(2));
  nibble::Runtime b(budget_options(4));
  for (const char* name : {"older", "older11"}) {
    const nibble::BackendInfo* in_a = a.registry().find(name);
    const nibble::BackendInfo* in_b = b.registry().find(name);
    ASSERT_NE(in_a, nullptr) << name;
    ASSERT_NE(in_b, nullptr) << name;
    EXPECT_TRUE(in_a->available) << name << ": " << in_a->probe_detail;
    EXPECT_EQ(in_a->abi_minor, std::string(name) == "older" ? 0 : 1);
    // Without a plugin context there is one load, entered once, shared by both registries.
    EXPECT_EQ(in_a->plugin, in_b->plugin) << name;
    ASSERT_EQ(in_b->kernels.size(), 1u) << name;
    EXPECT_THAT(explain_linear(b.registry()),
                Contains(std::string(name) + "/scalar: can run it (priority 1)"));
  }
}

}  // namespace
