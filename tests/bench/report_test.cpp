// The bench report: every file written, one chart mark per case, the roofs drawn where the
// measured limits are.
#include "report.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace fs = std::filesystem;
using ::testing::HasSubstr;

namespace {

nlohmann::json sample() {
  std::ifstream f(std::string(NIBBLE_TEST_SOURCE_DIR) + "/sample_results.json");
  return nlohmann::json::parse(f);
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

TEST(BenchReport, WritesJsonCsvAndBothCharts) {
  fs::path dir = fs::temp_directory_path() / "nibble_bench_report_test";
  fs::remove_all(dir);
  nibble::bench::write_report(sample(), dir);
  for (const char* f : {"results.json", "results.csv", "roofline.svg", "speedup.svg"})
    EXPECT_TRUE(fs::exists(dir / f)) << f;
  std::string csv = slurp(dir / "results.csv");
  EXPECT_EQ(count(csv, "\n"), 1u + 5u);  // header + one row per case
  EXPECT_THAT(csv, HasSubstr("cpu_amx,linear_a8,w4a8,4096,4096,1024"));
  EXPECT_EQ(nlohmann::json::parse(slurp(dir / "results.json")), sample());
}

TEST(BenchReport, TheRooflineHasOnePointPerCaseAndTheMeasuredRoofs) {
  std::string svg = nibble::bench::roofline_svg(sample());
  EXPECT_EQ(count(svg, "<circle"), 5u);
  EXPECT_THAT(svg, HasSubstr("read 29 GB/s"));
  EXPECT_THAT(svg, HasSubstr("AMX bf16 peak"));
  EXPECT_THAT(svg, HasSubstr("AMX int8 peak"));
  EXPECT_THAT(svg, HasSubstr("AMX bf16, operands loaded"));
  EXPECT_THAT(svg, HasSubstr("AMX int8, operands loaded"));
  EXPECT_THAT(svg, HasSubstr("cpu_amx w4a8 4096x4096 M=1024"));
  EXPECT_EQ(svg.rfind("</svg>"), svg.size() - 7);
}

TEST(BenchReport, TheSpeedupChartHasOneLinePerShapeAndMode) {
  std::string svg = nibble::bench::speedup_svg(sample());
  EXPECT_EQ(count(svg, "<polyline"), 2u);  // 4096x4096 w4a16 and w4a8
  EXPECT_EQ(count(svg, "<circle"), 5u);
  EXPECT_THAT(svg, HasSubstr("4096x4096 w4a16 M=16: 2.48x"));
}

TEST(BenchReport, ARunAtTwoThreadCountsKeepsTheirSeriesApart) {
  nlohmann::json run = sample();
  nlohmann::json cases = nlohmann::json::array();
  for (int threads : {1, 2})
    for (nlohmann::json c : run.at("cases")) {
      c["threads"] = threads;
      cases.push_back(c);
    }
  run["cases"] = cases;
  run["thread_counts"] = {1, 2};
  const std::string svg = nibble::bench::speedup_svg(run);
  EXPECT_EQ(count(svg, "<polyline"), 4u);  // 2 shapes-and-modes × 2 thread counts
  EXPECT_THAT(svg, HasSubstr("4096x4096 w4a16 at 2 threads M=16: 2.48x"));
  EXPECT_THAT(nibble::bench::roofline_svg(run), HasSubstr("4096x4096 M=1024 at 1 threads"));
  EXPECT_THAT(nibble::bench::results_csv(run),
              HasSubstr("cpu_amx,linear_a8,w4a8,4096,4096,1024,2,"));
}

TEST(BenchReport, NoTimingsIsAnError) {
  nlohmann::json empty = {{"cases", nlohmann::json::array()}};
  EXPECT_THROW(nibble::bench::roofline_svg(empty), std::runtime_error);
}

}  // namespace
