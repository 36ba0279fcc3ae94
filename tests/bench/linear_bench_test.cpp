// `nibble bench` end to end on small layers at two thread counts: every case runs at each count
// and says which, the limits are recorded per count, the targets list is there and each `met`
// agrees with its value and goal; the dispatch probe times every layer at every count; a mode
// without a kernel is skipped with the reason; a bad number is refused with the option, the value
// and the range.
#include "bench_cli.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

namespace fs = std::filesystem;

namespace {

using nibble::test::bench;
using nibble::test::read_json;

TEST(LinearBench, RunsEveryCaseAtEachThreadCountAndEvaluatesTheTargets) {
  const fs::path json = fs::temp_directory_path() / "nibble_linear_bench_test.json";
  fs::remove(json);
  ASSERT_EQ(bench({"--plugin-dir",  NIBBLE_PLUGIN_BUILD_DIR,
                   "--shapes",      "256x256,128x384",
                   "--m",           "1,4,16",
                   "--threads",     "2,1",
                   "--rounds",      "3",
                   "--min-seconds", "0",
                   "--cold-mib",    "4",
                   "--burst",       "2",
                   "--baseline",    "none",
                   "--no-warm",     "--json",
                   json.string()}),
            0);
  const nlohmann::json out = read_json(json);
  fs::remove(json);
  EXPECT_EQ(out.at("calls_per_sample"), 2);
  EXPECT_EQ(out.at("thread_counts"), nlohmann::json({1, 2}));  // sorted
  EXPECT_EQ(out.at("threads"), 2);
  ASSERT_EQ(out.at("cases").size(), 2u * 2u * 3u * 2u);  // threads × shapes × modes × M
  std::set<std::tuple<int, int64_t, int64_t, std::string>> seen;
  for (const auto& c : out.at("cases")) {
    const int t = c.at("threads");
    EXPECT_TRUE(t == 1 || t == 2);
    seen.insert(
        {t, c.at("K").get<int64_t>(), c.at("M").get<int64_t>(), c.at("mode").get<std::string>()});
    EXPECT_GT(c.at("read_gbps").at("median").get<double>(), 0);
    // Layers this small fit --burst 2 in a sample (a timed count: only its range is asserted;
    // the device bench test checks a cut burst on a forward of known length).
    EXPECT_GE(c.at("calls_per_sample").get<int>(), 1);
    EXPECT_LE(c.at("calls_per_sample").get<int>(), 2);
  }
  EXPECT_EQ(seen.size(), 2u * 2u * 3u * 2u);
  ASSERT_EQ(out.at("limits_by_threads").size(), 2u);
  EXPECT_EQ(out.at("limits_by_threads")[0].at("threads"), 1);
  EXPECT_EQ(out.at("limits_by_threads")[1].at("threads"), 2);
  // The top-level limits (the report's roofs) are those of the highest count.
  EXPECT_EQ(out.at("read_gbps"), out.at("limits_by_threads")[1].at("read_gbps"));

  // M = 4 and 16 targets per shape and mode at 2 threads, and M = 1 scaling from 1 to 2 threads;
  // the M = 1 bandwidth and large-M targets name shapes and M this run has not: skipped.
  const auto& targets = out.at("targets");
  std::map<std::string, int> per_target;
  for (const auto& t : targets) {
    for (const char* key : {"target", "value", "goal", "met", "shape", "M", "mode", "threads"})
      ASSERT_TRUE(t.contains(key)) << key << " in " << t.dump();
    EXPECT_EQ(t.at("met").get<bool>(), t.at("value").get<double>() >= t.at("goal").get<double>())
        << t.dump();
    EXPECT_EQ(t.at("threads"), 2) << t.dump();
    ++per_target[t.at("target")];
  }
  EXPECT_EQ(per_target["m4_bandwidth"], 4);
  EXPECT_EQ(per_target["m16_bandwidth"], 4);
  EXPECT_EQ(per_target["m1_scaling"], 4);
  EXPECT_EQ(per_target.count("m1_bandwidth"), 0u);
  EXPECT_EQ(per_target.count("w4a16_over_onednn"), 0u);
  // A target's value is the case's own ratio: M = 4 against the bandwidth.
  for (const auto& t : targets) {
    if (t.at("target") != "m4_bandwidth") continue;
    for (const auto& c : out.at("cases")) {
      if (c.at("threads") == 2 && c.at("M") == 4 && c.at("mode") == t.at("mode") &&
          std::to_string(c.at("K").get<int>()) + "x" + std::to_string(c.at("N").get<int>()) ==
              t.at("shape")) {
        EXPECT_DOUBLE_EQ(t.at("value").get<double>(), c.at("ratio_bandwidth").get<double>());
      }
    }
  }
  const std::string skipped = out.at("targets_skipped").dump();
  EXPECT_NE(skipped.find("m1_bandwidth: no M=1 case on 4096x4096 at 2 threads"), std::string::npos)
      << skipped;
  EXPECT_NE(skipped.find("w4a8_over_onednn"), std::string::npos) << skipped;
}

TEST(LinearBench, TheDispatchProbeTimesEveryLayerAtEachThreadCount) {
  const fs::path json = fs::temp_directory_path() / "nibble_dispatch_probe_test.json";
  fs::remove(json);
  ASSERT_EQ(
      bench({"--plugin-dir", NIBBLE_PLUGIN_BUILD_DIR, "--dispatch", "--threads", "1,2", "--modes",
             "w4a8", "--dispatch-calls", "20", "--dispatch-seconds", "0", "--json", json.string()}),
      0);
  const nlohmann::json out = read_json(json);
  fs::remove(json);
  const auto& d = out.at("dispatch");
  ASSERT_EQ(d.size(), 2u * 4u);  // threads × probe layers
  std::set<std::tuple<int, int, int>> layers;
  for (const auto& p : d) {
    layers.insert({p.at("K").get<int>(), p.at("N").get<int>(), p.at("M").get<int>()});
    EXPECT_GE(p.at("calls").get<int>(), 20);
    const double p10 = p.at("p10_us"), median = p.at("median_us"), p90 = p.at("p90_us");
    EXPECT_GT(p10, 0);
    EXPECT_LE(p.at("min_us").get<double>(), p10);
    EXPECT_LE(p10, median);
    EXPECT_LE(median, p90);
  }
  EXPECT_EQ(layers, (std::set<std::tuple<int, int, int>>{
                        {128, 128, 1}, {2048, 2048, 1}, {4096, 4096, 1}, {2048, 2048, 16}}));
  // The same layer at both counts.
  EXPECT_EQ(d[0].at("threads"), 1);
  EXPECT_EQ(d[4].at("threads"), 2);
}

// A mode for which the backend has no kernel at all is skipped with that reason (gpu_ref has no
// W4A8 kernel), not with an empty one.
TEST(LinearBench, SaysWhyAModeHasNoKernel) {
  testing::internal::CaptureStdout();
  bench({"--plugin-dir",  NIBBLE_PLUGIN_BUILD_DIR,
         "--backend",     "gpu_ref",
         "--shapes",      "256x256",
         "--m",           "1",
         "--threads",     "1",
         "--rounds",      "3",
         "--min-seconds", "0",
         "--cold-mib",    "4",
         "--modes",       "w4a8",
         "--baseline",    "none",
         "--no-onednn",   "--no-warm"});
  std::fflush(stdout);
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("256x256 w4a8: no kernel (the backend has no kernel for this operation in "
                     "this numeric mode on its device)"),
            std::string::npos)
      << out;
}

TEST(LinearBench, ABadNumberNamesTheOptionTheValueAndTheRange) {
  const std::pair<std::vector<std::string>, std::string> cases[] = {
      {{"--threads", "1,0"}, "--threads: '0' is not a whole number in [1, 4096]"},
      {{"--threads", "two"}, "--threads: 'two' is not a whole number in [1, 4096]"},
      {{"--m", "1,4x"}, "--m: '4x' is not a whole number in [1, 1048576]"},
      {{"--rounds", "2"}, "--rounds: '2' is not a whole number in [3, 200]"},
      {{"--min-seconds", "-1"}, "--min-seconds: '-1' is not a number in [0, 3600]"},
      {{"--burst", "0"}, "--burst: '0' is not a whole number in [1, 64]"},
      {{"--burst", "65"}, "--burst: '65' is not a whole number in [1, 64]"},
      {{"--shapes", "64x0"}, "--shapes N of 64x0: '0' is not a whole number in [1, 1048576]"},
      {{"--bits", "5"}, "--bits: '5' is not 4 or 8"},
  };
  for (const auto& [args, message] : cases) {
    testing::internal::CaptureStderr();
    EXPECT_EQ(bench(args), 2) << message;
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(err.rfind(message, 0), 0u) << err;
  }
}

}  // namespace
