// The targets evaluated on a run's JSON: each value is the case's own ratio at the highest thread
// count, M = 1 scaling divides the time's speed-up by the bandwidth's, `met` is value >= goal,
// and a target whose cases the run lacks is skipped with the reason.
#include "targets.hpp"

#include <gtest/gtest.h>

#include <string>

namespace {

using nlohmann::json;

json linear_case(int K, int N, int M, const char* mode, int threads, double seconds, double bw) {
  return {{"K", K},
          {"N", N},
          {"M", M},
          {"mode", mode},
          {"threads", threads},
          {"seconds", {{"median", seconds}}},
          {"read_gbps", {{"median", bw}}},
          {"ratio_bandwidth", 0.0}};
}

const json* find(const json& targets, const std::string& name, int M, const std::string& mode,
                 int threads) {
  for (const json& t : targets)
    if (t.at("target") == name && t.at("M") == M && t.at("mode") == mode &&
        t.at("threads") == threads)
      return &t;
  return nullptr;
}

// The target was evaluated, with this goal and this verdict.
void expect_goal(const json* t, double goal, bool met) {
  ASSERT_NE(t, nullptr);
  EXPECT_DOUBLE_EQ(t->at("goal").get<double>(), goal);
  EXPECT_EQ(t->at("met").get<bool>(), met) << t->dump();
}

TEST(BenchTargets, M1BandwidthAtTheHighestCountWithTheShapesGoal) {
  json run = {{"cases", json::array()}};
  json a = linear_case(4096, 4096, 1, "w4a16", 16, 1e-4, 100);
  a["ratio_bandwidth"] = 0.93;
  json b = linear_case(2048, 2048, 1, "w4a8", 16, 3e-5, 100);
  b["ratio_bandwidth"] = 0.79;
  json slow = linear_case(4096, 4096, 1, "w4a16", 8, 2e-4, 60);
  slow["ratio_bandwidth"] = 0.50;  // not at the highest count: no target of its own
  run["cases"] = {a, b, slow};
  const json e = nibble::bench::evaluate_targets(run);
  const json* t = find(e.at("targets"), "m1_bandwidth", 1, "w4a16", 16);
  ASSERT_NE(t, nullptr) << e.dump(1);
  EXPECT_DOUBLE_EQ(t->at("value").get<double>(), 0.93);
  EXPECT_DOUBLE_EQ(t->at("goal").get<double>(), 0.90);
  EXPECT_TRUE(t->at("met").get<bool>());
  EXPECT_EQ(t->at("shape"), "4096x4096");
  t = find(e.at("targets"), "m1_bandwidth", 1, "w4a8", 16);
  ASSERT_NE(t, nullptr);
  EXPECT_DOUBLE_EQ(t->at("goal").get<double>(), 0.80);
  EXPECT_FALSE(t->at("met").get<bool>());
  EXPECT_EQ(find(e.at("targets"), "m1_bandwidth", 1, "w4a16", 8), nullptr);
  const std::string skipped = e.at("skipped").dump();
  EXPECT_NE(skipped.find("no M=1 case on 4096x14336 at 16 threads"), std::string::npos) << skipped;
  EXPECT_NE(skipped.find("MoE targets"), std::string::npos) << skipped;
}

TEST(BenchTargets, ScalingIsTheTimesSpeedupOverTheBandwidthsGain) {
  json run = {{"cases",
               {linear_case(4096, 4096, 1, "w4a16", 1, 8e-4, 20),
                linear_case(4096, 4096, 1, "w4a16", 4, 2.5e-4, 60),
                linear_case(4096, 4096, 1, "w4a16", 16, 1.6e-4, 100)}}};
  const json e = nibble::bench::evaluate_targets(run);
  const json* at4 = find(e.at("targets"), "m1_scaling", 1, "w4a16", 4);
  const json* at16 = find(e.at("targets"), "m1_scaling", 1, "w4a16", 16);
  ASSERT_NE(at4, nullptr) << e.dump(1);
  ASSERT_NE(at16, nullptr);
  EXPECT_NEAR(at4->at("value").get<double>(), (8e-4 / 2.5e-4) / (60.0 / 20), 1e-12);    // 1.067
  EXPECT_NEAR(at16->at("value").get<double>(), (8e-4 / 1.6e-4) / (100.0 / 20), 1e-12);  // 1.0
  EXPECT_TRUE(at4->at("met").get<bool>());
  EXPECT_EQ(at16->at("from_threads"), 1);
  EXPECT_EQ(find(e.at("targets"), "m1_scaling", 1, "w4a16", 1), nullptr);
}

TEST(BenchTargets, LargeMAgainstOnednnAndTheLoadedCeiling) {
  json c = linear_case(4096, 4096, 1024, "w4a8", 2, 1e-2, 20);
  c["speedup_onednn"] = {{"median", 2.4}};
  c["ratio_loaded_peak"] = 0.41;
  json d = linear_case(4096, 4096, 256, "w4a16", 2, 1e-3, 20);
  d["speedup_onednn"] = {{"median", 1.6}};  // no AMX fields: the ceiling target is skipped
  const json e = nibble::bench::evaluate_targets({{"cases", {c, d}}});
  const json* vs = find(e.at("targets"), "w4a8_over_onednn", 1024, "w4a8", 2);
  ASSERT_NE(vs, nullptr) << e.dump(1);
  EXPECT_DOUBLE_EQ(vs->at("value").get<double>(), 2.4);
  EXPECT_FALSE(vs->at("met").get<bool>());
  const json* ceiling = find(e.at("targets"), "w4a8_loaded_int8_ceiling", 1024, "w4a8", 2);
  ASSERT_NE(ceiling, nullptr);
  EXPECT_TRUE(ceiling->at("met").get<bool>());
  const json* w16 = find(e.at("targets"), "w4a16_over_onednn", 256, "w4a16", 2);
  ASSERT_NE(w16, nullptr);
  EXPECT_TRUE(w16->at("met").get<bool>());
  const std::string skipped = e.at("skipped").dump();
  EXPECT_NE(skipped.find("w4a16_loaded_bf16_ceiling: no w4a16 case at M=1024"), std::string::npos)
      << skipped;
  EXPECT_NE(skipped.find("m1_scaling: the run has one thread count"), std::string::npos);
}

TEST(BenchTargets, MoeDecodeBandwidthAndFusedOverTheLoop) {
  auto moe = [](int M, double bw_ratio, double over_loop) {
    return json{{"kind", "moe"},
                {"shape", "qwen3"},
                {"M", M},
                {"mode", "w4a16"},
                {"threads", 16},
                {"ratio_bandwidth", bw_ratio},
                {"speedup_loop", {{"median", over_loop}}}};
  };
  const json e =
      nibble::bench::evaluate_targets({{"cases", {moe(1, 0.85, 1.1), moe(16, 0.2, 2.1)}}});
  const json* decode = find(e.at("targets"), "moe_decode_routed_bandwidth", 1, "w4a16", 16);
  ASSERT_NE(decode, nullptr) << e.dump(1);
  EXPECT_TRUE(decode->at("met").get<bool>());
  EXPECT_EQ(decode->at("shape"), "qwen3");
  expect_goal(find(e.at("targets"), "moe_fused_over_loop", 1, "w4a16", 16), 1.2, false);
  expect_goal(find(e.at("targets"), "moe_fused_over_loop", 16, "w4a16", 16), 2.0, true);
  EXPECT_EQ(find(e.at("targets"), "moe_decode_routed_bandwidth", 16, "w4a16", 16), nullptr);
  EXPECT_NE(e.at("skipped").dump().find("linear targets: no linear case"), std::string::npos);
}

TEST(BenchTargets, ADeviceRunIsJudgedAgainstItsOwnDenseKernel) {
  auto on_device = [](int K, int N, int M, double over_dense) {
    json c = linear_case(K, N, M, "w4a16", 16, 3e-5, 4000);
    c["ratio_bandwidth"] = 0.2;  // against the device's copy: no host bandwidth target
    c["speedup_dense"] = {{"median", over_dense}};
    c["device"] = "cuda:0";
    return c;
  };
  json run = {{"device", "cuda:0"},
              {"cases",
               {on_device(4096, 14336, 1, 3.2), on_device(4096, 4096, 16, 1.9),
                on_device(14336, 4096, 1024, 0.95), on_device(2048, 2048, 1, 1.2)}}};
  const json e = nibble::bench::evaluate_targets(run);
  const json* wide = find(e.at("targets"), "device_small_m_over_dense", 1, "w4a16", 16);
  ASSERT_NE(wide, nullptr) << e.dump(1);
  EXPECT_EQ(wide->at("shape"), "4096x14336");
  expect_goal(wide, 3.0, true);
  expect_goal(find(e.at("targets"), "device_small_m_over_dense", 16, "w4a16", 16), 2.0, false);
  expect_goal(find(e.at("targets"), "device_large_m_over_dense", 1024, "w4a16", 16), 0.9, true);
  // 2048x2048 is named by no device target; the host's targets are not evaluated at all.
  for (const json& t : e.at("targets")) {
    EXPECT_NE(t.at("shape"), "2048x2048") << t.dump();
    EXPECT_EQ(t.at("target").get<std::string>().rfind("device_", 0), 0u) << t.dump();
  }
  const std::string skipped = e.at("skipped").dump();
  EXPECT_NE(skipped.find("a run on cuda:0 is judged against its own dense kernel"),
            std::string::npos)
      << skipped;
  EXPECT_EQ(skipped.find("moe"), std::string::npos) << skipped;
  EXPECT_EQ(skipped.find("MoE"), std::string::npos) << skipped;
}

}  // namespace
