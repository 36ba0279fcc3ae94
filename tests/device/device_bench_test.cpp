// `nibble bench` on a device backend (the mock): layers and activations on the device, every
// sample waited for, timed on the device's events where it has them, the device's copy bandwidth
// as the memory limit and the backend's own dense kernel as the baseline instead of oneDNN.
#include "bench_cli.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace fs = std::filesystem;

namespace {

TEST(DeviceBench, TimesTheDeviceAgainstItsCopyBandwidthAndItsOwnDenseKernel) {
  const fs::path json = fs::temp_directory_path() / "nibble_device_bench_test.json";
  fs::remove(json);
  ASSERT_EQ(nibble::test::bench({"--plugin-dir",  NIBBLE_MOCKDEV_DIR,
                                 "--backend",     "mockdev",
                                 "--shapes",      "256x256",
                                 "--m",           "1,16",
                                 "--threads",     "1",
                                 "--rounds",      "3",
                                 "--min-seconds", "0",
                                 "--cold-mib",    "4",
                                 "--burst",       "2",
                                 "--modes",       "w4a16",
                                 "--baseline",    "none",
                                 "--no-warm",     "--json",
                                 json.string()}),
            0);
  const nlohmann::json out = nibble::test::read_json(json);
  fs::remove(json);
  EXPECT_EQ(out.at("device"), "ext_dev:0");
  ASSERT_EQ(out.at("cases").size(), 2u);
  for (const auto& c : out.at("cases")) {
    EXPECT_EQ(c.at("kernel"), "mock_linear");
    EXPECT_EQ(c.at("device"), "ext_dev:0");
    EXPECT_EQ(c.at("dense_kernel"), "mock_dense");
    EXPECT_GT(c.at("dense_bf16_seconds").at("median").get<double>(), 0);
    EXPECT_GT(c.at("speedup_dense").at("median").get<double>(), 0);
    EXPECT_FALSE(c.contains("speedup_onednn")) << "oneDNN runs on the host, not on the device";
    EXPECT_FALSE(c.contains("amx_bf16_tflops"));
    EXPECT_GT(c.at("read_gbps").at("median").get<double>(), 0);
    EXPECT_GT(c.at("seconds").at("median").get<double>(), 0);
  }
  // 256x256 is named by no device target; the host's targets are not evaluated for a device.
  EXPECT_TRUE(out.at("targets").empty()) << out.at("targets").dump();
  EXPECT_NE(out.at("targets_skipped").dump().find("judged against its own dense kernel"),
            std::string::npos)
      << out.at("targets_skipped").dump();
  for (const char* moe : {"MoE", "moe_"})
    EXPECT_EQ(out.at("targets_skipped").dump().find(moe), std::string::npos)
        << "the MoE bench does not run on a device: " << out.at("targets_skipped").dump();
}

// One 128×128 case at M = 1 (W4A16, one thread, --burst 8) on the mock device with the mock's
// environment variables `env` (name, value) set for the run only (also when the bench throws); the
// run's JSON. `dense`: with the backend's dense baseline.
nlohmann::json mock_case_with(std::vector<std::pair<const char*, const char*>> env, bool dense) {
  const fs::path json = fs::temp_directory_path() / "nibble_device_bench_case_test.json";
  fs::remove(json);
  struct Setting {
    const char* name;
    Setting(const char* n, const char* v) : name(n) { setenv(n, v, 1); }
    ~Setting() { unsetenv(name); }
  };
  std::vector<std::string> args = {"--plugin-dir",  NIBBLE_MOCKDEV_DIR,
                                   "--backend",     "mockdev",
                                   "--shapes",      "128x128",
                                   "--m",           "1",
                                   "--threads",     "1",
                                   "--rounds",      "3",
                                   "--min-seconds", "0",
                                   "--cold-mib",    "1",
                                   "--burst",       "8",
                                   "--modes",       "w4a16",
                                   "--baseline",    "none",
                                   "--no-warm",     "--json",
                                   json.string()};
  if (!dense) args.push_back("--no-onednn");
  int rc = -1;
  {
    std::vector<std::unique_ptr<Setting>> settings;
    for (const auto& [name, value] : env)
      settings.push_back(std::make_unique<Setting>(name, value));
    rc = nibble::test::bench(args);
  }
  EXPECT_EQ(rc, 0);
  if (rc != 0) return {};
  nlohmann::json out = nibble::test::read_json(json);
  fs::remove(json);
  return out;
}

// A sample's calls are queued back to back and waited for once, after the last: with every wait
// taking 20 ms, 8 calls per sample cost 2.5 ms each on the host's clock (plus their own few
// microseconds), where a wait after each call would cost 20 ms each; the device's events time the
// calls alone. Both the backend's kernel and its dense baseline.
TEST(DeviceBench, WaitsForTheDeviceOncePerSampleNotOncePerCall) {
  constexpr double kWait = 0.020;
  const nlohmann::json out = mock_case_with({{"NIBBLE_MOCKDEV_SYNC_US", "20000"}}, true);
  ASSERT_EQ(out.value("cases", nlohmann::json::array()).size(), 1u);
  EXPECT_THAT(out.at("timing").get<std::string>(), ::testing::HasSubstr("device events"));
  const auto& c = out.at("cases")[0];
  // The first call's own time (queueing it) sizes the samples, not its 20 ms wait, which would
  // leave 2 calls of the 8.
  EXPECT_GT(c.at("calls_per_sample").get<int>(), 2);
  for (const char* key : {"host_seconds", "dense_host_seconds"}) {
    const double per_call = c.at(key).at("median").get<double>();
    EXPECT_GE(per_call, kWait / 8) << key << ": the sample must include its wait";
    EXPECT_LT(per_call, kWait / 2) << key << ": waited for after every call";
  }
  for (const char* key : {"seconds", "dense_bf16_seconds"}) {
    const double per_call = c.at(key).at("median").get<double>();
    EXPECT_GT(per_call, 0) << key;
    EXPECT_LT(per_call, kWait / 8) << key << ": the device's events counted the host's wait";
  }
}

// Without events the host's clock is the case's time, wait included, and no host_seconds is
// written beside it.
TEST(DeviceBench, ADeviceWithoutEventsIsTimedOnTheHostsClock) {
  constexpr double kWait = 0.020;
  const nlohmann::json out =
      mock_case_with({{"NIBBLE_MOCKDEV_SYNC_US", "20000"}, {"NIBBLE_MOCKDEV_EVENTS", "0"}}, true);
  ASSERT_EQ(out.value("cases", nlohmann::json::array()).size(), 1u);
  EXPECT_THAT(out.at("timing").get<std::string>(), ::testing::HasSubstr("host clock"));
  const auto& c = out.at("cases")[0];
  EXPECT_FALSE(c.contains("host_seconds"));
  for (const char* key : {"seconds", "dense_bf16_seconds"}) {
    const double per_call = c.at(key).at("median").get<double>();
    EXPECT_GE(per_call, kWait / 8) << key << ": the sample must include its wait";
    EXPECT_LT(per_call, kWait / 2) << key << ": waited for after every call";
  }
}

// The events time the device's work: each forward taking 3 ms, a call reads at least 3 ms and,
// with 20 ms waits that the events leave out, less than 3 ms plus the wait's share of a sample.
TEST(DeviceBench, EventsTimeTheDevicesWork) {
  constexpr double kForward = 0.003, kWait = 0.020;
  const nlohmann::json out = mock_case_with(
      {{"NIBBLE_MOCKDEV_FORWARD_US", "3000"}, {"NIBBLE_MOCKDEV_SYNC_US", "20000"}}, false);
  ASSERT_EQ(out.value("cases", nlohmann::json::array()).size(), 1u);
  const auto& c = out.at("cases")[0];
  const int calls = c.at("calls_per_sample").get<int>();
  ASSERT_GT(calls, 1);
  const double device = c.at("seconds").at("median").get<double>();
  const double host = c.at("host_seconds").at("median").get<double>();
  EXPECT_GE(device, kForward);
  EXPECT_LT(device, kForward + kWait / calls) << "the events counted the wait";
  EXPECT_GE(host, kForward + kWait / calls) << "the host's clock left out the wait";
}

// A call of 20 ms or more: --burst 8 of them would take over the 50 ms a sample may, so its
// samples run at most 2 calls (one where the host is slow), and the time per call divides by the
// calls the sample ran (dividing by 8 would read under 20 ms).
TEST(DeviceBench, ACallLongerThanASampleGetsFewerCallsPerSample) {
  constexpr double kForward = 0.020;
  const nlohmann::json out = mock_case_with({{"NIBBLE_MOCKDEV_FORWARD_US", "20000"}}, false);
  ASSERT_EQ(out.value("cases", nlohmann::json::array()).size(), 1u);
  EXPECT_EQ(out.at("calls_per_sample"), 8);  // the run's: --burst
  const auto& c = out.at("cases")[0];
  const int calls = c.at("calls_per_sample").get<int>();
  EXPECT_GE(calls, 1);
  EXPECT_LE(calls, 2);
  EXPECT_GE(c.at("seconds").at("median").get<double>(), kForward)
      << "the sample's time divided by more calls than it ran";
}

}  // namespace
