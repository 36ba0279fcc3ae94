// The device option: its spellings, its errors (naming the source and what was expected), and the
// places it comes from (the struct, the environment, a config file).
#include <nibble/error.hpp>
#include <nibble/options.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "layer_test_util.hpp"

using ::testing::HasSubstr;
using namespace nibble;

namespace {

std::string error_of(const std::string& text) {
  try {
    parse_device(text, "--device");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(DeviceOption, SpellingsParseToDLPackDevices) {
  struct Case {
    const char* text;
    DLDeviceType type;
    int32_t id;
  } cases[] = {{"cpu", kDLCPU, 0},         {"cuda", kDLCUDA, 0},        {"cuda:1", kDLCUDA, 1},
               {"rocm:3", kDLROCM, 3},     {"ext_dev:1", kDLExtDev, 1}, {"cuda_host", kDLCPU, 0},
               {"vulkan:0", kDLVulkan, 0}, {"cuda:1023", kDLCUDA, 1023}};
  for (const Case& c : cases) {
    const DLDevice d = parse_device(c.text, "test");
    EXPECT_EQ(d.device_type, c.type) << c.text;
    EXPECT_EQ(d.device_id, c.id) << c.text;
  }
}

TEST(DeviceOption, BadSpellingsAreRefusedNamingTheSourceAndWhatWasExpected) {
  EXPECT_THAT(error_of("gpu"), HasSubstr("--device: device 'gpu' is not cpu or a device type"));
  EXPECT_THAT(error_of("cuda:x"), HasSubstr("--device: the index of device 'cuda:x'"));
  EXPECT_THAT(error_of("cuda:-1"), HasSubstr("the index of device 'cuda:-1'"));
  EXPECT_THAT(error_of("cuda:1024"), HasSubstr("the index of device 'cuda:1024'"));
  EXPECT_THAT(error_of("cuda:"), HasSubstr("the index of device 'cuda:'"));
  EXPECT_THAT(error_of("cpu:1"), HasSubstr("is host memory, which has no index"));
  EXPECT_THAT(error_of("cuda_managed"), HasSubstr("managed memory"));
  EXPECT_THAT(error_of(""), HasSubstr("device '' is not cpu"));
  // Bytes from the user are escaped in the message.
  EXPECT_THAT(error_of("cu\x1b[2Jda"), Not(HasSubstr("\x1b")));
}

TEST(DeviceOption, TheEnvironmentAndConfigFilesSetIt) {
  RuntimeOptions o;
  setenv("NIBBLE_DEVICE", "cuda:2", 1);
  apply_environment(o);
  unsetenv("NIBBLE_DEVICE");
  EXPECT_EQ(o.device, "cuda:2");
  setenv("NIBBLE_DEVICE", "tpu", 1);
  try {
    apply_environment(o);
    ADD_FAILURE() << "NIBBLE_DEVICE=tpu accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("NIBBLE_DEVICE: device 'tpu'"));
  }
  unsetenv("NIBBLE_DEVICE");
  const auto dir = test::scratch("device_option");
  const std::string good = (dir / "good.json").string(), bad = (dir / "bad.json").string();
  std::ofstream(good) << R"({"device": "ext_dev:1"})";
  std::ofstream(bad) << R"({"device": 3})";
  RuntimeOptions c;
  apply_config_file(c, good);
  EXPECT_EQ(c.device, "ext_dev:1");
  try {
    apply_config_file(c, bad);
    ADD_FAILURE() << "a device of 3 accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("key \"device\": expected a device"));
  }
}

}  // namespace
