// `nibble bench --moe` end to end on a small layer: every case is timed against the loop of
// linear calls and oneDNN, the fused output agrees with the loop's, and the JSON holds the ratios.
#include "bench_cli.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

using nibble::test::bench;
using nibble::test::read_json;

TEST(MoeBench, TimesFusedLoopAndOnednnAndTheirOutputsAgree) {
  const fs::path json = fs::temp_directory_path() / "nibble_moe_bench_test.json";
  const fs::path report = fs::temp_directory_path() / "nibble_moe_bench_test_report";
  fs::remove(json);
  fs::remove_all(report);
  ASSERT_EQ(bench({"--plugin-dir", NIBBLE_PLUGIN_BUILD_DIR, "--moe", "8x2x256x128,6x3x128x96",
                   "--m", "1,5,40", "--threads", "1,2", "--rounds", "3", "--min-seconds", "0",
                   "--cold-mib", "4", "--json", json.string(), "--report", report.string()}),
            0);
  // The report draws MoE cases too: one roofline point per case, a speed-up line per series.
  std::ifstream svg(report / "roofline.svg");
  const std::string roofline((std::istreambuf_iterator<char>(svg)), {});
  size_t points = 0;
  for (size_t at = roofline.find("<circle"); at != std::string::npos;
       at = roofline.find("<circle", at + 1))
    ++points;
  EXPECT_EQ(points, 24u);
  EXPECT_NE(roofline.find("moe 8x2x256x128"), std::string::npos);
  EXPECT_TRUE(fs::exists(report / "speedup.svg"));
  fs::remove_all(report);
  const nlohmann::json out = read_json(json);
  ASSERT_EQ(out.at("cases").size(), 2u * 2u * 3u * 2u);  // thread counts × shapes × M × modes
  EXPECT_EQ(out.at("thread_counts"), nlohmann::json({1, 2}));
  for (const auto& c : out.at("cases")) {
    const std::string what = c.at("shape").get<std::string>() +
                             " M=" + std::to_string(c.at("M").get<int>()) + " " +
                             c.at("mode").get<std::string>();
    EXPECT_EQ(c.at("kind"), "moe");
    EXPECT_TRUE(c.at("threads") == 1 || c.at("threads") == 2) << what;
    EXPECT_GT(c.at("seconds").at("median").get<double>(), 0) << what;
    EXPECT_GT(c.at("speedup_loop").at("median").get<double>(), 0) << what;
    EXPECT_GT(c.at("speedup_onednn").at("median").get<double>(), 0) << what;
    EXPECT_GE(c.at("layer_copies").get<int>(), 2) << what;
    EXPECT_GE(c.at("calls_per_sample").get<int>(), 1) << what;
    EXPECT_LE(c.at("calls_per_sample").get<int>(), 8) << what;  // the default --burst at most
    // Same weights, same routing: the fused kernel and the loop of linear calls agree (rms of
    // the difference over rms) within their numeric modes: the loop rounds gate/up and h to
    // bf16; W4A8 quantizes h per row. A wrong expert or slot would be off by ~100 %.
    const double bound = c.at("mode") == "w4a16" ? 1e-2 : 4e-2;
    EXPECT_LT(c.at("loop_relative_difference").get<double>(), bound) << what;
    // Prepared experts stay within 1.05 × the checkpoint's packed bytes.
    EXPECT_LE(c.at("prepared_over_checkpoint").get<double>(), 1.05) << what;
    EXPECT_GT(c.at("prepared_over_checkpoint").get<double>(), 0.9) << what;
  }
  // Decode and fused-over-loop targets for every shape and mode at 2 threads, each `met` its
  // value against its goal.
  size_t decode = 0;
  for (const auto& t : out.at("targets")) {
    EXPECT_EQ(t.at("threads"), 2) << t.dump();
    EXPECT_EQ(t.at("met").get<bool>(), t.at("value").get<double>() >= t.at("goal").get<double>());
    decode += t.at("target") == "moe_decode_routed_bandwidth";
  }
  EXPECT_EQ(decode, 2u * 2u);
  EXPECT_EQ(out.at("targets").size(), 2u * 2u * 3u);  // decode, loop at M=1 and at M=40
  fs::remove(json);
}

TEST(MoeBench, RefusesAnUnknownShapeByName) {
  testing::internal::CaptureStderr();
  EXPECT_EQ(bench({"--plugin-dir", NIBBLE_PLUGIN_BUILD_DIR, "--moe", "8x9x64x64"}), 1);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("unknown shape 8x9x64x64"), std::string::npos) << err;
}

}  // namespace
