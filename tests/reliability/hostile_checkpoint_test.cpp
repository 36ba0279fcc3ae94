// Hostile checkpoints: names that once crashed layer discovery, inputs that were silently
// misread (duplicate keys, empty backend items), errors that blamed the wrong tensor, and values
// that open() does not read but inspect must warn about.
#include <nibble/checkpoint.hpp>
#include <nibble/error.hpp>
#include <nibble/options.hpp>
#include <nibble/quant_config.hpp>
#include <nibble/sdk/numeric.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <limits>

#include "error_text.hpp"
#include "hostile_input.hpp"

using ::testing::AllOf;
using ::testing::HasSubstr;
using namespace nibble;
using namespace nibble::test;

namespace {

TEST(HostileCheckpoint, HugeNamesAreDiscoveredInLinearTime) {
  // 30,000 characters overflowed the stack of std::regex in discovery; 3 MB names must neither
  // crash nor take long, whether or not they look like an expert's.
  for (size_t length : {size_t(30000), size_t(3) << 20}) {
    ScratchDir dir("huge_names");
    const std::string block = std::string(length, 'a');
    std::map<std::string, OwnedTensor> t;
    for (const char* proj : {"gate_proj", "up_proj", "down_proj"})
      add_gptq_layer(t, block + ".experts.0." + proj, 32, 32);
    t[block + ".gate.weight"] = OwnedTensor::zeros(DType::F16, {1, 32});
    add_gptq_layer(t, std::string(length, 'b') + ".experts.x.w1");  // not an expert name
    write_checkpoint(dir.path(), t, gptq_config());
    const auto t0 = std::chrono::steady_clock::now();
    ChildRun r = in_child([&] {
      Checkpoint ckpt = Checkpoint::open(dir.path());
      return std::to_string(ckpt.moe_blocks().size()) + " " +
             std::to_string(ckpt.moe_blocks()[0].prefix.size()) + " " +
             std::to_string(ckpt.linear_layers().size());
    });
    EXPECT_EQ(r.status, 0) << "crashed";
    EXPECT_EQ(r.output, "1 " + std::to_string(length) + " 2") << r.output.substr(0, 300);
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 20.0);
  }
}

TEST(HostileCheckpoint, DuplicateKeysInConfigsAreRefusedNotLastOneWins) {
  ScratchDir dir("dup_config");
  std::map<std::string, OwnedTensor> t;
  add_gptq_layer(t, "model.layers.0.mlp.down_proj");
  write_checkpoint(dir.path(), t,
                   R"({"quantization_config": {"quant_method": "gptq", "bits": 8, "bits": 4,)"
                   R"( "group_size": 32, "sym": false}})");
  EXPECT_THAT(error_text([&] { Checkpoint::open(dir.path()); }),
              AllOf(HasSubstr("config.json"), HasSubstr("duplicate key 'bits'"),
                    HasSubstr("ending at byte")));
  EXPECT_THAT(error_text([&] { parse_quant_config_text(R"({"bits":4,"bits":4})", "q.json"); }),
              HasSubstr("duplicate key"));
}

TEST(HostileCheckpoint, TheOutvotedTensorIsBlamedForAShapeDisagreement) {
  // qweight [64, 384] at bits=8 packs K = 256, but g_idx (512) and scales [4, 384] x group 128
  // both say K = 512: qweight is the odd one out.
  ScratchDir dir("outvoted");
  const std::string p = "model.layers.0.self_attn.q_proj";
  std::map<std::string, OwnedTensor> t;
  t[p + ".qweight"] = OwnedTensor::zeros(DType::I32, {64, 384});
  t[p + ".qzeros"] = OwnedTensor::zeros(DType::I32, {4, 96});
  t[p + ".scales"] = OwnedTensor::zeros(DType::F16, {4, 384});
  t[p + ".g_idx"] = OwnedTensor::zeros(DType::I32, {512});
  write_checkpoint(dir.path(), t,
                   R"({"quantization_config": {"quant_method": "gptq", "bits": 8,)"
                   R"( "group_size": 128, "sym": false, "desc_act": true}})");
  const std::string msg = error_text([&] { Checkpoint::open(dir.path()); });
  EXPECT_THAT(msg, AllOf(HasSubstr("tensor " + p + ".qweight"), HasSubstr("[64, 384]"),
                         HasSubstr("bits=8"), HasSubstr("g_idx [512]"),
                         HasSubstr("scales [4, 384]"), HasSubstr("both say K = 512")));
  // And N: scales and qzeros agree on 384 against a qweight of 392 columns.
  t[p + ".qweight"] = OwnedTensor::zeros(DType::I32, {128, 392});
  write_checkpoint(dir.path(), t,
                   R"({"quantization_config": {"quant_method": "gptq", "bits": 8,)"
                   R"( "group_size": 128, "sym": false, "desc_act": true}})");
  EXPECT_THAT(
      error_text([&] { Checkpoint::open(dir.path()); }),
      AllOf(HasSubstr(p + ".qweight"), HasSubstr("[128, 392]"), HasSubstr("both say N = 384")));
}

TEST(HostileCheckpoint, EmptyBackendItemsAreRefusedNotTakenAsAuto) {
  for (const char* bad : {",", "cpu_amx,", ",npu_ref", "a,,b", " , "}) {
    EXPECT_THAT(error_text([&] { parse_backend_list(bad, "--backend"); }),
                AllOf(HasSubstr("--backend"), HasSubstr("empty item")))
        << bad;
  }
  EXPECT_EQ(parse_backend_list("", "--backend"), std::vector<std::string>{"auto"});
  EXPECT_EQ(parse_backend_list(" cpu_amx , * ", "--backend"),
            (std::vector<std::string>{"cpu_amx", "*"}));
  ScratchDir dir("backend_config");
  RuntimeOptions options;
  write_file(dir / "c.json", R"({"backend": ","})");
  EXPECT_THAT(error_text([&] { apply_config_file(options, (dir / "c.json").string()); }),
              HasSubstr("empty item"));
  write_file(dir / "c.json", R"({"backend": []})");
  EXPECT_THAT(error_text([&] { apply_config_file(options, (dir / "c.json").string()); }),
              HasSubstr("at least one backend"));
  setenv("NIBBLE_BACKEND", ",", 1);
  EXPECT_THAT(error_text([&] { apply_environment(options); }), HasSubstr("NIBBLE_BACKEND"));
  unsetenv("NIBBLE_BACKEND");
  // The CLI flag reaches selection, which refuses it too.
  ChildRun r =
      run_cli({"run", "--no-default-plugin-dir", "--plugin-dir", NIBBLE_PLUGIN_BUILD_DIR,
               "--backend", ",", "--model", std::string(NIBBLE_FIXTURES_DIR) + "/gptq_v1_sym_g128",
               "--layer", "model.layers.0.self_attn.q_proj", "--input",
               std::string(NIBBLE_FIXTURES_DIR) + "/gptq_v1_sym_g128/io.safetensors:x_m1",
               "--output", (dir / "y.safetensors").string()});
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("empty item"));
}

TEST(HostileCheckpoint, InspectWarnsAboutNonFiniteScalesAndRouterWeights) {
  ScratchDir dir("non_finite");
  const std::string block = "model.layers.0.mlp";
  std::map<std::string, OwnedTensor> t;
  for (int e = 0; e < 2; ++e)
    for (const char* proj : {"gate_proj", "up_proj", "down_proj"})
      add_gptq_layer(t, block + ".experts." + std::to_string(e) + "." + proj, 32, 32);
  add_gptq_layer(t, "model.layers.0.self_attn.q_proj");
  auto set_f16 = [&](const std::string& name, size_t i, float v) {
    const uint16_t h = sdk::f32_to_f16(v);
    std::memcpy(t[name].data.data() + 2 * i, &h, 2);
  };
  t[block + ".gate.weight"] = OwnedTensor::zeros(DType::F16, {2, 32});
  for (size_t i = 0; i < 8; ++i) set_f16("model.layers.0.self_attn.q_proj.scales", i, 0.01f);
  write_checkpoint(dir.path(), t, gptq_config());
  // Control: finite values, no warning.
  EXPECT_TRUE(find_suspect_values(Checkpoint::open(dir.path())).empty());

  set_f16("model.layers.0.self_attn.q_proj.scales", 3, std::numeric_limits<float>::quiet_NaN());
  set_f16(block + ".experts.1.down_proj.scales", 5, std::numeric_limits<float>::infinity());
  set_f16(block + ".gate.weight", 40, -std::numeric_limits<float>::infinity());
  write_checkpoint(dir.path(), t, gptq_config());
  const auto warnings = find_suspect_values(Checkpoint::open(dir.path()));
  ASSERT_EQ(warnings.size(), 3u);
  const std::string all = warnings[0] + "\n" + warnings[1] + "\n" + warnings[2];
  EXPECT_THAT(all, AllOf(HasSubstr("tensor model.layers.0.self_attn.q_proj.scales"),
                         HasSubstr("1 of 8 scales are not finite (first: element 3 = nan)"),
                         HasSubstr("tensor model.layers.0.mlp.experts.1.down_proj.scales"),
                         HasSubstr("tensor model.layers.0.mlp.gate.weight"),
                         HasSubstr("router weights are not finite (first: element 40 = -inf)")));
  ChildRun r = run_cli({"inspect", dir.path().string()});
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_THAT(r.output, AllOf(HasSubstr("warnings (3)"), HasSubstr("q_proj.scales")));
}

}  // namespace
