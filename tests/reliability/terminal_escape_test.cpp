// No raw byte from a checkpoint reaches the terminal: every message path that shows a tensor
// name, dtype, __metadata__ key, config string, shard name, layer list, folder name or the JSON
// parser's own message is walked with hostile text (ESC sequences, BEL, C1 controls, NUL, bidi
// overrides, invalid UTF-8), through the CLI, and its whole output must be terminal-safe.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "hostile_input.hpp"

using ::testing::HasSubstr;
using namespace nibble;
using namespace nibble::test;

namespace {

// Hostile fragments: a terminal retitle, clear screen, a C1 CSI, a NUL, a right-to-left override.
const std::vector<std::string> kHostile = {"\x1b]0;owned\x07", "\x1b[2J",
                                           "\xc2\x9b"
                                           "31m",
                                           std::string("nul\0hidden", 10), "rtl\xe2\x80\xae"};

// JSON spelling of a hostile fragment (how a crafted header carries it).
std::string json_string(const std::string& s) { return nlohmann::json(s).dump(); }

void expect_safe(const ChildRun& r, int status, const std::string& what) {
  std::string why;
  EXPECT_EQ(r.status, status) << what << ": " << r.output.substr(0, 600);
  EXPECT_TRUE(terminal_safe(r.output, &why))
      << what << ": " << why << " in " << escape_untrusted(r.output, 600);
  EXPECT_FALSE(r.output.empty()) << what;
}

class TerminalEscape : public ::testing::TestWithParam<std::string> {
 protected:
  ScratchDir dir_{"escape"};
  const std::string& h() const { return GetParam(); }
  fs::path ckpt(const std::string& name) { return dir_ / name; }
};

TEST_P(TerminalEscape, TensorNamesDtypesAndMetadataKeys) {
  // An orphan qzeros names its tensor; an unknown dtype names the dtype; a bad __metadata__ value
  // names its key; a hostile name in a valid checkpoint is listed by inspect (text and JSON).
  std::map<std::string, OwnedTensor> t;
  add_gptq_layer(t, "model.layers.0.q_proj");
  t["model.evil" + h() + ".qzeros"] = OwnedTensor::zeros(DType::I32, {1, 1});
  write_checkpoint(ckpt("orphan"), t, gptq_config());
  expect_safe(run_cli({"inspect", ckpt("orphan").string()}), 1, "orphan qzeros");

  fs::create_directories(ckpt("dtype"));
  write_file(ckpt("dtype") / "model.safetensors",
             safetensors_image("{\"x\":{\"dtype\":" + json_string("F" + h()) +
                                   ",\"shape\":[1],\"data_offsets\":[0,4]}}",
                               "abcd"));
  expect_safe(run_cli({"inspect", ckpt("dtype").string()}), 1, "dtype");

  fs::create_directories(ckpt("meta"));
  write_file(ckpt("meta") / "model.safetensors",
             safetensors_image("{\"__metadata__\":{" + json_string("k" + h()) + ":1}}", ""));
  expect_safe(run_cli({"inspect", ckpt("meta").string()}), 1, "__metadata__ key");

  std::map<std::string, OwnedTensor> ok;
  add_gptq_layer(ok, "model.layers.0." + h() + ".q_proj");
  ok["model.layers.0." + h() + ".dense.weight"] = OwnedTensor::zeros(DType::F16, {4, 4});
  write_checkpoint(ckpt("listed"), ok, gptq_config());
  ChildRun text = run_cli({"inspect", ckpt("listed").string()});
  expect_safe(text, 0, "inspect listing");
  EXPECT_THAT(text.output, HasSubstr(escape_untrusted("model.layers.0." + h() + ".q_proj")));
  ChildRun json = run_cli({"inspect", ckpt("listed").string(), "--json"});
  expect_safe(json, 0, "inspect --json");
  EXPECT_TRUE(nlohmann::json::accept(json.output)) << json.output;
}

TEST_P(TerminalEscape, ConfigStrings) {
  std::map<std::string, OwnedTensor> t;
  add_gptq_layer(t, "model.layers.0.q_proj");
  auto config_case = [&](const std::string& name, const std::string& config, int status) {
    write_checkpoint(ckpt(name), t, config);
    expect_safe(run_cli({"inspect", ckpt(name).string()}), status, name);
  };
  const std::string v = json_string(h());
  config_case("quant_method",
              R"({"quantization_config": {"quant_method": )" + v + R"(, "bits": 4}})", 1);
  config_case("checkpoint_format", gptq_config(", \"checkpoint_format\": " + v), 1);
  config_case("dynamic_bad", gptq_config(", \"dynamic\": {" + json_string("(" + h()) + ": {}}"), 1);
  // \Q...\E quotes the fragment, so the rule is a valid regex that inspect lists.
  config_case("dynamic_ok",
              gptq_config(", \"dynamic\": {" + json_string("x\\Q" + h() + "\\E") + ": {}}"), 0);
  config_case("dynamic_key",
              gptq_config(", \"dynamic\": {\"x\": {" + json_string("k" + h()) + ": 1}}"), 1);
  config_case("not_convert", gptq_config(", \"modules_to_not_convert\": [" + v + "]"), 0);
  config_case("not_convert_hit",
              gptq_config(", \"modules_to_not_convert\": [" + json_string("q_proj") + "]"), 0);
  config_case("bits_value",
              R"({"quantization_config": {"quant_method": "gptq", "bits": )" + v +
                  R"(, "group_size": 32}})",
              1);
  config_case("duplicate", gptq_config(", " + v + ": 1, " + v + ": 2"), 1);
}

TEST_P(TerminalEscape, MoeScoringAndTheRunLayerList) {
  ScratchDir out("escape_run");
  std::map<std::string, OwnedTensor> t;
  const std::string block = "model." + h() + ".mlp";
  for (const char* proj : {"gate_proj", "up_proj", "down_proj"})
    add_gptq_layer(t, block + ".experts.0." + proj, 32, 32);
  t[block + ".gate.weight"] = OwnedTensor::zeros(DType::F16, {1, 32});
  write_checkpoint(ckpt("moe"), t,
                   gptq_config("", "\"num_experts_per_tok\": 1, \"scoring_func\": " +
                                       json_string("soft" + h())));
  expect_safe(run_cli({"inspect", ckpt("moe").string()}), 0, "scoring_func listed");
  write_file(dir_ / "x.safetensors",
             safetensors_image(R"({"x":{"dtype":"F32","shape":[1,32],"data_offsets":[0,128]}})",
                               std::string(128, '\0')));
  const std::vector<std::string> common = {"run",          "--no-default-plugin-dir",
                                           "--plugin-dir", NIBBLE_PLUGIN_BUILD_DIR,
                                           "--model",      ckpt("moe").string(),
                                           "--input",      (dir_ / "x.safetensors").string() + ":x",
                                           "--output",     (out / "y.safetensors").string()};
  auto with_layer = [&](const std::string& layer) {
    auto args = common;
    args.push_back("--layer");
    args.push_back(layer);
    return run_cli(args);
  };
  expect_safe(with_layer(block), 1, "scoring_func refused at run");
  expect_safe(with_layer("missing.layer"), 1, "it has: list");
  expect_safe(with_layer("missing" + h()), 1, "the asked-for name echoed");
  ChildRun r = with_layer("missing.layer");
  EXPECT_THAT(r.output, HasSubstr("it has:"));
}

TEST_P(TerminalEscape, ShardNamesTheParserMessageAndFolderNames) {
  fs::create_directories(ckpt("shards"));
  write_file(ckpt("shards") / "model.safetensors.index.json",
             "{\"weight_map\": {\"x\": " + json_string("s" + h() + ".safetensors") + "}}");
  expect_safe(run_cli({"inspect", ckpt("shards").string()}), 1, "shard name");
  // Raw control bytes inside a JSON string are invalid JSON; nlohmann's "last read" echoes them.
  fs::create_directories(ckpt("raw"));
  write_file(ckpt("raw") / "model.safetensors", safetensors_image("{\"" + h() + "\":{}}", ""));
  expect_safe(run_cli({"inspect", ckpt("raw").string()}), 1, "parser message");
  write_file(ckpt("raw") / "config.json", "{\"a\": \"" + h() + "\"}");
  std::map<std::string, OwnedTensor> t;
  add_gptq_layer(t, "model.layers.0.q_proj");
  write_safetensors(ckpt("raw") / "model.safetensors", t);
  expect_safe(run_cli({"inspect", ckpt("raw").string()}), 1, "config parser message");
  // A folder whose name is not UTF-8 (or holds the fragment): listing and JSON stay clean.
  for (const std::string& folder : {std::string("ckpt\xff\xfe"), "ckpt" + h()}) {
    if (folder.find('\0') != std::string::npos) continue;  // not a possible file name
    write_checkpoint(dir_ / folder, t, gptq_config());
    expect_safe(run_cli({"inspect", (dir_ / folder).string()}), 0, "folder name");
    ChildRun json = run_cli({"inspect", (dir_ / folder).string(), "--json"});
    expect_safe(json, 0, "folder name, --json");
    EXPECT_TRUE(nlohmann::json::accept(json.output)) << escape_untrusted(json.output);
  }
}

// Numbered names: the fragments themselves would reach the terminal in test listings.
INSTANTIATE_TEST_SUITE_P(Fragments, TerminalEscape, ::testing::ValuesIn(kHostile),
                         [](const auto& info) { return "fragment" + std::to_string(info.index); });

}  // namespace
