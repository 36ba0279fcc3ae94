// `nibble bench` on a device backend (the mock): layers and activations on the device, every
// sample waited for, the device's copy bandwidth as the memory limit and the backend's own dense
// kernel as the baseline instead of oneDNN.
#include "bench_cli.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>

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

// A sample's calls are queued back to back and waited for once, after the last: with every wait
// taking 20 ms, 8 calls per sample cost 2.5 ms each (plus their own few microseconds), where a
// wait after each call would cost 20 ms each. Both the backend's kernel and its dense baseline.
TEST(DeviceBench, WaitsForTheDeviceOncePerSampleNotOncePerCall) {
  const fs::path json = fs::temp_directory_path() / "nibble_device_bench_wait_test.json";
  fs::remove(json);
  constexpr double kWait = 0.020;
  struct SlowWaits {  // set for this test only, also when the bench throws
    SlowWaits() { setenv("NIBBLE_MOCKDEV_SYNC_US", "20000", 1); }
    ~SlowWaits() { unsetenv("NIBBLE_MOCKDEV_SYNC_US"); }
  };
  int rc = -1;
  {
    const SlowWaits slow;
    rc = nibble::test::bench({"--plugin-dir",  NIBBLE_MOCKDEV_DIR,
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
                              json.string()});
  }
  ASSERT_EQ(rc, 0);
  const nlohmann::json out = nibble::test::read_json(json);
  fs::remove(json);
  ASSERT_EQ(out.at("cases").size(), 1u);
  const auto& c = out.at("cases")[0];
  // The first call's own time (queueing it) sizes the samples, not its 20 ms wait: all 8 calls.
  EXPECT_EQ(c.at("calls_per_sample"), 8);
  for (const char* key : {"seconds", "dense_bf16_seconds"}) {
    const double per_call = c.at(key).at("median").get<double>();
    EXPECT_GE(per_call, kWait / 8) << key << ": the sample must include its wait";
    EXPECT_LT(per_call, kWait / 2) << key << ": waited for after every call";
  }
}

}  // namespace
