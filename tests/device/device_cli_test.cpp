// The CLI on a device backend: `nibble run --backend mockdev` stages x and y through the plugin's
// memory and reproduces the upstream fixtures; `nibble backends` shows each kernel's device and
// the backend's device count.
#include <nibble/registry.hpp>
#include <nibble/safetensors.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <array>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "layer_test_util.hpp"

using ::testing::HasSubstr;
using namespace nibble;
using namespace nibble::test;

namespace {

std::string flags() {
  return std::string(" --no-default-plugin-dir --plugin-dir ") + NIBBLE_MOCKDEV_DIR;
}

// Run `args` through the CLI; its exit status, with stdout and stderr in *out.
int run_cli(const std::string& args, std::string* out) {
  const std::string cmd = std::string(NIBBLE_CLI) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return -1;
  std::array<char, 4096> buf{};
  out->clear();
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out->append(buf.data(), n);
  return pclose(p);
}

double rel_err_of(const TensorView& y, const TensorView& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < size_t(y.numel()); ++i) {
    const double d = y.as_double(i) - want.as_double(i);
    num += d * d;
    den += want.as_double(i) * want.as_double(i);
  }
  return std::sqrt(num / den);
}

// The bound kernel `name` of the mock declares for bf16 (or f32) activations.
double declared_bound(const std::string& name, bool bf16) {
  RuntimeOptions o;
  o.use_default_plugin_dir = false;
  o.plugin_dirs = {NIBBLE_MOCKDEV_DIR};
  auto reg = Registry::load(o);
  for (const auto& k : reg->find("mockdev")->kernels)
    if (k.name == name) return bf16 ? k.bound_bf16 : k.bound_f32;
  ADD_FAILURE() << "no kernel " << name;
  return 0;
}

TEST(DeviceCli, RunOnTheDeviceReproducesTheFixtures) {
  struct Fixture {
    const char* dir;
    const char* layer;
    double bound_scale;  // the MoE output compounds two layers and the router
  } fixtures[] = {{"gptq_v1_sym_g128", "model.layers.0.self_attn.q_proj", 1},
                  {"awq_gemm_g128", "model.layers.0.self_attn.q_proj", 1},
                  {"moe_gptq_e8_top2", "model.layers.0.mlp", 2}};
  const auto out_dir = scratch("device_cli");
  for (const Fixture& f : fixtures) {
    const std::string data = std::string(NIBBLE_FIXTURES_DIR) + "/" + f.dir;
    auto io = SafetensorsFile::open(data + "/io.safetensors");
    for (const char* tag : {"", "bf16_"}) {
      for (int M : {1, 33}) {
        const std::string sfx = std::string(tag) + "m" + std::to_string(M);
        const std::string out = (out_dir / (std::string(f.dir) + sfx + ".st")).string();
        std::string said;
        ASSERT_EQ(run_cli("run" + flags() + " --backend mockdev --model " + data + " --layer " +
                              f.layer + " --input " + data + "/io.safetensors:x_" + sfx +
                              " --output " + out + " --explain",
                          &said),
                  0)
            << said;
        // Every part ran on a device kernel (--explain: "layer [part]: backend/kernel").
        EXPECT_THAT(said, testing::ContainsRegex("\\]: mockdev/mock_(linear|dense|moe)\n"));
        EXPECT_THAT(said, Not(testing::ContainsRegex("\\]: mockdev/host_linear")));
        auto got = SafetensorsFile::open(out);
        const TensorView& y = got->tensor("y");
        const TensorView& want = io->tensor("y_" + sfx);
        ASSERT_EQ(y.numel(), want.numel());
        const double bound = declared_bound(f.bound_scale > 1 ? "mock_moe" : "mock_linear", *tag);
        EXPECT_LE(rel_err_of(y, want), f.bound_scale * bound) << f.dir << " " << sfx;
      }
    }
  }
}

TEST(DeviceCli, DemoRunsEveryLayerOnTheDevice) {
  for (const char* dir : {"gptq_v1_sym_g128", "moe_gptq_e8_top2"}) {
    const std::string data = std::string(NIBBLE_FIXTURES_DIR) + "/" + dir;
    std::string said;
    ASSERT_EQ(
        run_cli("demo" + flags() + " --backend mockdev --model " + data + " --quiet --json", &said),
        0)
        << said;
    const auto j = nlohmann::json::parse(said.substr(said.find('{')));
    size_t ran = 0;
    for (const auto& r : j.at("results")) {
      EXPECT_EQ(r.at("backend"), "mockdev") << r.dump();
      if (r.contains("not_run")) continue;  // w4a8: the mock implements w4a16 only
      ++ran;
      EXPECT_THAT(r.at("kernel").get<std::string>(), testing::MatchesRegex("mock_(linear|moe)"));
      EXPECT_TRUE(r.at("within_bound").get<bool>()) << r.dump();
      EXPECT_GT(r.at("seconds").get<double>(), 0) << r.dump();
    }
    EXPECT_GE(ran, 1u) << dir << ": " << said;
  }
}

TEST(DeviceCli, RunWithTheDeviceSetToCpuTakesTheHostKernel) {
  const std::string data = std::string(NIBBLE_FIXTURES_DIR) + "/gptq_v1_sym_g128";
  const std::string out = (scratch("device_cli") / "cpu.st").string();
  std::string said;
  ASSERT_EQ(run_cli("run" + flags() + " --backend mockdev --device cpu --model " + data +
                        " --layer model.layers.0.self_attn.q_proj --input " + data +
                        "/io.safetensors:x_m1 --output " + out + " --explain",
                    &said),
            0)
      << said;
  EXPECT_THAT(said, HasSubstr("mockdev/host_linear"));
  EXPECT_THAT(said, HasSubstr("mockdev/mock_linear: runs on ext_dev, the layer is on cpu"));
}

TEST(DeviceCli, ABadDeviceIsRefusedBeforeAnythingRuns) {
  std::string said;
  EXPECT_NE(run_cli("backends" + flags() + " --device cuda:x", &said), 0);
  EXPECT_THAT(said, HasSubstr("--device: the index of device 'cuda:x'"));
}

TEST(DeviceCli, BackendsShowsKernelDevicesAndTheDeviceCount) {
  std::string said;
  ASSERT_EQ(run_cli("backends" + flags(), &said), 0) << said;
  EXPECT_THAT(said, HasSubstr("devices: 2 ext_dev"));
  EXPECT_THAT(said, testing::ContainsRegex("kernel mock_linear .* device ext_dev"));
  EXPECT_THAT(said, testing::ContainsRegex("kernel host_linear .* device cpu"));
  ASSERT_EQ(run_cli("backends --json" + flags(), &said), 0) << said;
  const auto j = nlohmann::json::parse(said);
  ASSERT_EQ(j["backends"].size(), 1u);
  const auto& b = j["backends"][0];
  EXPECT_EQ(b["devices"]["type"], "ext_dev");
  EXPECT_EQ(b["devices"]["count"], 2);
  for (const auto& k : b["kernels"])
    EXPECT_EQ(k["device"], k["name"] == "host_linear" ? "cpu" : "ext_dev") << k["name"];
}

}  // namespace
