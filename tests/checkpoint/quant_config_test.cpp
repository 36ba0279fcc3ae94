// Quantization configs: synonyms, GPTQModel meta nesting, refusals by name, dynamic overrides,
// modules_to_not_convert and the agreement of several config files.
#include <nibble/quant_config.hpp>

#include "checkpoint_test_util.hpp"

namespace nibble {
namespace {

using test::error_of;
using test::expect_mentions;

QuantConfig parse(const std::string& text) { return parse_quant_config_text(text, "cfg.json"); }
std::string refuse(const std::string& text) {
  return error_of([&] { parse(text); });
}

TEST(QuantConfig, AutoGptqAndTransformersKeys) {
  auto c = parse(R"({"quantization_config":{"bits":8,"group_size":-1,"desc_act":true,"sym":false,
                    "quant_method":"gptq","checkpoint_format":"gptq_v2","static_groups":true}})");
  EXPECT_EQ(c.method, QuantMethod::Gptq);
  EXPECT_EQ(c.bits, 8);
  EXPECT_EQ(c.group_size, -1);
  EXPECT_TRUE(c.desc_act);
  EXPECT_FALSE(c.sym);
  EXPECT_TRUE(c.static_groups);
  EXPECT_EQ(c.checkpoint_format, "gptq_v2");
  auto d = parse(R"({"bits":4,"group_size":128,"desc_act":false})");  // old quantize_config.json
  EXPECT_EQ(d.method, QuantMethod::Gptq);
  EXPECT_EQ(d.checkpoint_format, "gptq");
  EXPECT_TRUE(d.sym);
}

TEST(QuantConfig, GptqModelFormatAndMetaNesting) {
  auto c = parse(R"({"bits":4,"group_size":32,"method":"gptq","format":"gptq_v2",
                    "meta":{"static_groups":true,"true_sequential":true},"pack_dtype":"int32","lm_head":true})");
  EXPECT_EQ(c.checkpoint_format, "gptq_v2");
  EXPECT_TRUE(c.static_groups);
  EXPECT_TRUE(c.true_sequential);
  EXPECT_TRUE(c.lm_head);
  expect_mentions(
      refuse(
          R"({"bits":4,"group_size":32,"quant_method":"gptq","format":"gptq","checkpoint_format":"gptq_v2"})"),
      {"contradicts"});
  expect_mentions(
      refuse(R"({"bits":4,"group_size":32,"quant_method":"gptq","pack_dtype":"int16"})"),
      {"pack_dtype", "int16"});
}

TEST(QuantConfig, AwqSynonyms) {
  auto c = parse(
      R"({"zero_point":true,"q_group_size":64,"w_bit":4,"version":"GEMM","modules_to_not_convert":["gate"]})");
  EXPECT_EQ(c.method, QuantMethod::Awq);
  EXPECT_EQ(c.bits, 4);
  EXPECT_EQ(c.group_size, 64);
  EXPECT_EQ(c.checkpoint_format, "gemm");
  EXPECT_FALSE(c.sym);
  EXPECT_FALSE(c.for_module("model.layers.0.mlp.gate").quantized);
  EXPECT_TRUE(c.for_module("model.layers.0.mlp.down_proj").quantized);
  auto t = parse(
      R"({"quant_method":"awq","bits":4,"group_size":128,"version":"gemm","zero_point":true,"modules_to_not_convert":null})");
  EXPECT_TRUE(t.modules_to_not_convert.empty());
}

TEST(QuantConfig, UnsupportedOptionsAreRefusedByName) {
  expect_mentions(refuse(R"({"quant_method":"gptq","bits":3,"group_size":128})"),
                  {"bits=3", "4 and 8"});
  expect_mentions(refuse(R"({"quant_method":"gptq","bits":2,"group_size":128})"),
                  {"bits=2", "4 and 8"});
  expect_mentions(
      refuse(R"({"quant_method":"gptq","bits":4,"group_size":128,"checkpoint_format":"marlin"})"),
      {"checkpoint_format", "marlin", "gptq and gptq_v2"});
  expect_mentions(
      refuse(R"({"quant_method":"gptq","bits":4,"group_size":128,"checkpoint_format":"bitblas"})"),
      {"checkpoint_format", "bitblas"});
  expect_mentions(
      refuse(R"({"quant_method":"gptq","bits":4,"group_size":128,"is_marlin_format":true})"),
      {"is_marlin_format"});
  for (const char* v : {"gemv", "gemv_fast", "marlin"}) {
    expect_mentions(refuse(fmt::format(
                        R"({{"quant_method":"awq","bits":4,"group_size":128,"version":"{}"}})", v)),
                    {"version", v, "gemm"});
  }
  expect_mentions(
      refuse(R"({"quant_method":"awq","bits":4,"group_size":128,"format":"gemv_fast"})"),
      {"format", "gemv_fast", "gemm"});
  expect_mentions(
      refuse(R"({"quant_method":"awq","bits":4,"group_size":128,"checkpoint_format":"marlin"})"),
      {"checkpoint_format", "marlin"});
  expect_mentions(refuse(R"({"quant_method":"awq","bits":8,"group_size":128})"),
                  {"bits=8", "AWQ GEMM supports 4"});
  expect_mentions(refuse(R"({"quant_method":"awq","bits":4,"group_size":128,"zero_point":false})"),
                  {"zero_point"});
  expect_mentions(refuse(R"({"quant_method":"fp8","bits":8,"group_size":128})"),
                  {"quant_method", "fp8"});
  expect_mentions(refuse(R"({"quant_method":"gptq","bits":4,"group_size":0})"), {"group_size=0"});
  expect_mentions(refuse(R"({"quant_method":"gptq","bits":"4","group_size":128})"),
                  {"bits", "integer"});
  expect_mentions(refuse(R"({"quant_method":"gptq","group_size":128})"), {"no bits"});
  expect_mentions(refuse(R"({"foo":1})"), {"cannot tell the quantization method"});
  expect_mentions(refuse("[1]"), {"must be a JSON object"});
  expect_mentions(refuse("{"), {"not valid JSON"});
}

// Python's named groups and lazy quantifiers are read as GPTQModel writes them.
TEST(QuantConfig, DynamicRulesReadPythonSyntax) {
  auto c = parse(R"J({"quant_method":"gptq","bits":4,"group_size":128,"dynamic":{
      "(?P<layer>model\\.layers\\.\\d+)\\..*?down_proj":{"bits":8}}})J");
  EXPECT_EQ(c.for_module("model.layers.12.mlp.down_proj").bits, 8);
  EXPECT_EQ(c.for_module("model.layers.x.mlp.down_proj").bits, 4);
}

// A rule that sends a backtracking engine into exponential time or deep recursion (the fuzzer
// found one) is matched in linear time: these calls return instead of hanging the loader.
TEST(QuantConfig, PathologicalDynamicRulesMatchInLinearTime) {
  auto c = parse(R"J({"quant_method":"gptq","bits":4,"group_size":128,"dynamic":{
      "(.*)*(.*)*(.*)*(.*)*(.*)*(.*)*z":{"bits":8},"(a|aa)*(a|aa)*(a|aa)*b":{"bits":8},
      "((x?)*)*y":{"bits":8}}})J");
  const std::string long_name(200000, 'a');
  EXPECT_EQ(c.for_module(long_name).bits, 4);
  EXPECT_EQ(c.for_module(std::string(60, 'a') + "c").bits, 4);
  EXPECT_EQ(c.for_module("model.layers.0.mlp.experts.0.gate_proj_without_the_letter").bits, 4);
  EXPECT_EQ(c.for_module(long_name + "z").bits, 8);
}

TEST(QuantConfig, DynamicOverridesAndSkips) {
  auto c = parse(R"({"quant_method":"gptq","bits":4,"group_size":128,"sym":true,"dynamic":{
      "-:.*\\.mlp\\.gate$":{},
      "+:.*\\.layers\\.1\\..*down_proj":{"bits":8,"group_size":32,"sym":false},
      ".*\\.layers\\.1\\..*":{"group_size":64,"damp_percent":0.1}}})");
  ASSERT_EQ(c.dynamic.size(), 3u);
  auto skip = c.for_module("model.layers.0.mlp.gate");
  EXPECT_FALSE(skip.quantized);
  expect_mentions(skip.reason, {"-:"});
  auto down = c.for_module("model.layers.1.mlp.down_proj");
  EXPECT_TRUE(down.quantized);
  EXPECT_EQ(down.bits, 8);
  EXPECT_EQ(down.group_size, 32);
  EXPECT_FALSE(down.sym);
  auto up = c.for_module("model.layers.1.mlp.up_proj");  // first match wins: the third rule
  EXPECT_EQ(up.bits, 4);
  EXPECT_EQ(up.group_size, 64);
  auto other =
      c.for_module("model.layers.10.mlp.up_proj");  // re.match is anchored at the start only
  EXPECT_EQ(other.group_size, 128);
  EXPECT_TRUE(other.reason.empty());
  // Backreferences and lookaround need a backtracking engine: refused by name, never ignored.
  expect_mentions(
      refuse(R"J({"quant_method":"gptq","bits":4,"group_size":128,"dynamic":{"(a)\\1":{}}})J"),
      {"dynamic rule", "(a)\\\\1", "regex", "backreferences"});  // the backslash escaped
  expect_mentions(
      refuse(R"J({"quant_method":"gptq","bits":4,"group_size":128,"dynamic":{"(?=a)b":{}}})J"),
      {"dynamic rule", "(?=a)b", "regex"});
  expect_mentions(
      refuse(R"({"quant_method":"gptq","bits":4,"group_size":128,"dynamic":{"a":{"adapter":{}}}})"),
      {"dynamic rule \"a\"", "adapter", "bits, group_size"});
  expect_mentions(
      refuse(R"({"quant_method":"gptq","bits":4,"group_size":128,"dynamic":{"a":{"bits":3}}})"),
      {"dynamic rule \"a\"", "bits=3"});
  expect_mentions(refuse(R"({"quant_method":"awq","bits":4,"group_size":128,"dynamic":{"a":{}}})"),
                  {"dynamic", "awq"});
}

TEST(QuantConfig, ToJsonParsesBack) {
  QuantConfig c;
  c.bits = 8;
  c.group_size = 32;
  c.sym = false;
  c.desc_act = true;
  c.checkpoint_format = "gptq_v2";
  auto back = parse(c.to_json().dump());
  EXPECT_EQ(back.bits, 8);
  EXPECT_EQ(back.group_size, 32);
  EXPECT_FALSE(back.sym);
  EXPECT_TRUE(back.desc_act);
  EXPECT_EQ(back.checkpoint_format, "gptq_v2");
}

TEST(QuantConfig, DirectoryFilesMustAgree) {
  test::TempDir dir;
  EXPECT_FALSE(load_quant_config(dir.path()).has_value());
  test::write_text(dir / "config.json", R"({"model_type":"x"})");
  EXPECT_FALSE(load_quant_config(dir.path()).has_value());
  test::write_text(dir / "quantize_config.json",
                   R"({"bits":4,"group_size":128,"desc_act":false,"sym":true})");
  auto c = load_quant_config(dir.path());
  ASSERT_TRUE(c.has_value());
  expect_mentions(c->source, {"quantize_config.json"});
  test::write_text(dir / "config.json",
                   R"({"quantization_config":{"quant_method":"gptq","bits":4,"group_size":64}})");
  expect_mentions(error_of([&] { load_quant_config(dir.path()); }),
                  {"config.json", "quantize_config.json", "group_size", "64"});
}

}  // namespace
}  // namespace nibble
