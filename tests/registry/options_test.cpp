// Runtime options: config file, environment, and their precedence.
#include <nibble/error.hpp>
#include <nibble/options.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

using ::testing::HasSubstr;

namespace {

std::string write_temp(const std::string& name, const std::string& text) {
  auto p = std::filesystem::temp_directory_path() / name;
  std::ofstream(p) << text;
  return p.string();
}

TEST(Options, ConfigFileSetsEveryField) {
  std::string f = write_temp("nibble_opts_ok.json",
                             R"({"backend": ["cpu_amx", "npu_ref"], "plugin_dirs": ["/a", "/b"],
                                 "threads": 3, "mode": "w4a8", "plugins": ["cpu_amx"]})");
  nibble::RuntimeOptions o;
  nibble::apply_config_file(o, f);
  EXPECT_EQ(o.backend, "cpu_amx,npu_ref");
  EXPECT_EQ(o.plugin_dirs, (std::vector<std::string>{"/a", "/b"}));
  EXPECT_EQ(o.threads, 3);
  EXPECT_EQ(o.mode, nibble::NumericMode::W4A8);
  EXPECT_EQ(o.allowed_plugins, (std::vector<std::string>{"cpu_amx"}));
}

TEST(Options, BadConfigNamesFileAndKey) {
  nibble::RuntimeOptions o;
  std::string f = write_temp("nibble_opts_bad.json", R"({"threads": "many"})");
  try {
    nibble::apply_config_file(o, f);
    FAIL() << "accepted a bad value";
  } catch (const nibble::Error& e) {
    EXPECT_THAT(e.what(), HasSubstr(f));
    EXPECT_THAT(e.what(), HasSubstr("\"threads\""));
  }
  std::string g = write_temp("nibble_opts_unknown.json", R"({"backends": "x"})");
  EXPECT_THROW(nibble::apply_config_file(o, g), nibble::Error);
  std::string h = write_temp("nibble_opts_json.json", "{not json");
  EXPECT_THROW(nibble::apply_config_file(o, h), nibble::Error);
}

TEST(Options, EnvironmentOverridesTheConfigFile) {
  std::string f = write_temp("nibble_opts_env.json", R"({"backend": "npu_ref", "threads": 1})");
  setenv("NIBBLE_CONFIG", f.c_str(), 1);
  setenv("NIBBLE_BACKEND", "gpu_ref", 1);
  setenv("NIBBLE_PLUGIN_PATH", "/x:/y", 1);
  nibble::RuntimeOptions o;
  nibble::apply_environment(o);
  unsetenv("NIBBLE_CONFIG");
  unsetenv("NIBBLE_BACKEND");
  unsetenv("NIBBLE_PLUGIN_PATH");
  EXPECT_EQ(o.backend, "gpu_ref");  // env over file
  EXPECT_EQ(o.threads, 1);          // file over default
  EXPECT_EQ(o.plugin_dirs, (std::vector<std::string>{"/x", "/y"}));
}

TEST(Options, BadEnvironmentValuesAreNamed) {
  setenv("NIBBLE_MODE", "w3a7", 1);
  nibble::RuntimeOptions o;
  try {
    nibble::apply_environment(o);
    FAIL();
  } catch (const nibble::Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("NIBBLE_MODE"));
    EXPECT_THAT(e.what(), HasSubstr("w4a16"));
  }
  unsetenv("NIBBLE_MODE");
}

TEST(Options, SplitList) {
  EXPECT_EQ(nibble::split_list(" a, b,,c ", ','), (std::vector<std::string>{"a", "b", "c"}));
}

}  // namespace
