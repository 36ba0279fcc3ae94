// Linear layers from an engine's tensors: every upstream fixture built through
// linear_from_tensors from the checkpoint's own tensors decodes to the same canonical weight and
// runs bit-identically to rt.linear on every backend, within the kernel's bound of the float64
// outputs; the tensors may be freed after the call; malformed tensors and formats are refused
// with messages naming the tensor and what was expected.
#include <nibble/error.hpp>
#include <nibble/runtime.hpp>

#include <cstring>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "engine_tensors_util.hpp"
#include "layer_test_util.hpp"

using ::testing::AllOf;
using ::testing::HasSubstr;
using namespace nibble;
using namespace nibble::test;

namespace {

const std::string kFixtures = NIBBLE_FIXTURES_DIR;

Mat load(const TensorView& v) {
  Mat m(v.shape[0], v.shape[1], to_dlpack(v.dtype));
  std::memcpy(m.words.data(), v.data, v.nbytes);
  return m;
}

std::vector<double> as_doubles(const TensorView& v) {
  std::vector<double> out(size_t(v.numel()));
  for (size_t i = 0; i < out.size(); ++i) out[i] = v.as_double(i);
  return out;
}

bool same_bytes(const Mat& a, const Mat& b) {
  return std::memcmp(a.words.data(), b.words.data(), a.size() * sdk::dtype_bytes(a.t.dtype)) == 0;
}

TEST(DecodeTensors, EveryFixtureLayerDecodesAsItsCheckpointDoes) {
  for (const char* f : {"gptq_v1_sym_g128", "awq_gemm_g128", "moe_gptq_e8_top2"}) {
    auto ckpt = Checkpoint::open(kFixtures + "/" + f);
    int layers = 0;
    for (const auto& name : ckpt.tensors().names()) {
      if (!name.ends_with(".qweight")) continue;
      const std::string prefix = name.substr(0, name.size() - 8);
      LentLayer lent = lend_layer(ckpt, prefix);
      std::vector<std::string> warnings;
      CanonicalWeight w = decode_tensors(prefix, quant_tensors(lent), format_of(ckpt), &warnings);
      EXPECT_TRUE(same_weight(w, ckpt.decode_linear(prefix))) << f << " " << prefix;
      ++layers;
    }
    EXPECT_GT(layers, 0) << f;
  }
}

struct Case {
  const char* backend;
  NumericMode mode;
};

class FixtureFromTensors : public ::testing::TestWithParam<Case> {};

TEST_P(FixtureFromTensors, RunsBitIdenticallyToTheCheckpointLayer) {
  const Case c = GetParam();
  Runtime rt(in_tree(c.backend, c.mode));
  ASSERT_NE(rt.registry().find(c.backend), nullptr);
  for (const char* f : {"gptq_v1_sym_g128", "awq_gemm_g128"}) {
    const std::string dir = kFixtures + "/" + f;
    auto ckpt = Checkpoint::open(dir);
    auto io = SafetensorsFile::open(dir + "/io.safetensors");
    const std::string prefix = "model.layers.0.self_attn.q_proj";
    LinearLayer from_ckpt = rt.linear(ckpt, prefix);
    LinearLayer from_tensors;
    {
      // Copies the engine frees once the layer is built: the plugin keeps its own.
      LentLayer lent = lend_layer(ckpt, prefix, /*copy=*/true);
      from_tensors = rt.linear_from_tensors(prefix, quant_tensors(lent), format_of(ckpt));
      for (auto& [s, l] : lent) std::memset(l->owned.data(), 0xA5, l->owned.size());
    }
    EXPECT_EQ(from_tensors.placement().backend, c.backend);
    EXPECT_EQ(from_tensors.placement().kernel, from_ckpt.placement().kernel);
    EXPECT_EQ(from_tensors.in_features(), 512);
    EXPECT_EQ(from_tensors.out_features(), 384);
    for (const char* tag : {"", "bf16_"}) {
      for (int M : {1, 7, 33}) {
        const std::string sfx = std::string(tag) + "m" + std::to_string(M);
        Mat x = load(io->tensor("x_" + sfx));
        Mat y(M, 384, x.t.dtype), y_ckpt(M, 384, x.t.dtype);
        y.poison();
        y_ckpt.poison();
        from_tensors.forward(x.t, y.t);
        from_ckpt.forward(x.t, y_ckpt.t);
        EXPECT_TRUE(same_bytes(y, y_ckpt)) << f << " " << sfx;
        size_t bad = 0;
        const double err = rel_err(y, as_doubles(io->tensor("y_" + sfx)), &bad);
        EXPECT_EQ(bad, 0u) << f << " " << sfx;
        // The fixture's y is the float64 product of the dequantized weight, so the kernel's
        // declared bound applies as it stands.
        EXPECT_LE(err, declared_bound(rt, from_tensors.placement(), x.t.dtype)) << f << " " << sfx;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Backends, FixtureFromTensors,
    ::testing::Values(Case{"npu_ref", NumericMode::W4A16}, Case{"gpu_ref", NumericMode::W4A16},
                      Case{"cpu_amx", NumericMode::W4A16}, Case{"cpu_amx", NumericMode::W4A8}),
    [](const auto& info) {
      return std::string(info.param.backend) + "_" + mode_name(info.param.mode);
    });

// Malformed inputs, each built from a fixture's good tensors with one thing wrong.
class MalformedTensors : public ::testing::Test {
 protected:
  const std::string name = "model.layers.0.self_attn.q_proj";
  Checkpoint gptq = Checkpoint::open(kFixtures + "/gptq_v1_sym_g128");
  Checkpoint awq = Checkpoint::open(kFixtures + "/awq_gemm_g128");
  LentLayer g = lend_layer(gptq, name, true);
  LentLayer a = lend_layer(awq, name, true);

  std::string error_of(const LentLayer& l, const QuantFormat& f) {
    try {
      decode_tensors(name, quant_tensors(l), f);
    } catch (const Error& e) {
      return e.what();
    }
    return "(no error)";
  }
  std::string gptq_error() { return error_of(g, format_of(gptq)); }
  std::string awq_error() { return error_of(a, format_of(awq)); }
  // Give tensor `s` of `l` a new shape over the same (or more) bytes.
  static void reshape(LentLayer& l, const char* s, std::vector<int64_t> shape) {
    Lent& t = *l.at(s);
    size_t bytes = dtype_size(DType::I32);
    for (int64_t d : shape) bytes *= size_t(d);
    if (t.owned.size() < bytes) t.owned.resize(bytes);
    t.shape = std::move(shape);
    t.t.data = t.owned.data();
    t.t.shape = t.shape.data();
    t.t.ndim = int32_t(t.shape.size());
  }
};

TEST_F(MalformedTensors, TheGoodTensorsDecode) {
  EXPECT_EQ(gptq_error(), "(no error)");
  EXPECT_EQ(awq_error(), "(no error)");
}

TEST_F(MalformedTensors, WrongDtypeIsNamed) {
  g.at("qweight")->t.dtype = {kDLInt, 64, 1};
  reshape(g, "qweight", {64, 192});  // same bytes as [64, 384] int32
  g.at("qweight")->t.dtype = {kDLInt, 64, 1};
  EXPECT_THAT(gptq_error(), AllOf(HasSubstr(name + ".qweight"), HasSubstr("has dtype I64"),
                                  HasSubstr("expected I32")));
  a.at("scales")->t.dtype = {kDLInt, 16, 1};
  EXPECT_THAT(awq_error(), AllOf(HasSubstr(name + ".scales"), HasSubstr("dtype I16"),
                                 HasSubstr("expected F16 or BF16 or F32")));
}

TEST_F(MalformedTensors, AnUnsupportedDtypeIsNamed) {
  g.at("scales")->t.dtype = {kDLUInt, 16, 1};
  EXPECT_THAT(gptq_error(), AllOf(HasSubstr(name + ".scales"), HasSubstr("[4, 384]"),
                                  HasSubstr("uint16"), HasSubstr("expected one of float16")));
  g.at("scales")->t.dtype = {kDLFloat, 16, 2};
  EXPECT_THAT(gptq_error(), AllOf(HasSubstr(name + ".scales"), HasSubstr("x2 lanes")));
}

TEST_F(MalformedTensors, AWrongShapeIsNamedForEachTensor) {
  LentLayer saved = lend_layer(gptq, name, true);
  reshape(g, "qweight", {64, 384, 1});
  EXPECT_THAT(gptq_error(), AllOf(HasSubstr(name + ".qweight"), HasSubstr("[64, 384, 1]"),
                                  HasSubstr("expected a 2-D tensor")));
  g = lend_layer(gptq, name, true);
  reshape(g, "qzeros", {4, 49});
  EXPECT_THAT(gptq_error(), AllOf(HasSubstr(name + ".qzeros"), HasSubstr("[4, 49]"),
                                  HasSubstr("expected [4, 48]")));
  g = lend_layer(gptq, name, true);
  g.erase("g_idx");  // without a g_idx, scales must have ceil(K / group_size) rows
  reshape(g, "scales", {5, 384});
  g.at("scales")->t.dtype = {kDLFloat, 16, 1};
  EXPECT_THAT(gptq_error(), AllOf(HasSubstr(name + ".scales"), HasSubstr("[5, 384]"),
                                  HasSubstr("expected [4, 384]")));
  g = lend_layer(gptq, name, true);
  reshape(g, "g_idx", {513});
  EXPECT_THAT(gptq_error(),
              AllOf(HasSubstr(name + ".g_idx"), HasSubstr("[513]"), HasSubstr("expected [512]")));
  g = lend_layer(gptq, name, true);
  reshape(g, "bias", {385});
  g.at("bias")->t.dtype = {kDLFloat, 16, 1};
  EXPECT_THAT(gptq_error(),
              AllOf(HasSubstr(name + ".bias"), HasSubstr("[385]"), HasSubstr("expected [384]")));
  reshape(a, "qweight", {512, 47});
  EXPECT_THAT(awq_error(), AllOf(HasSubstr(name + ".qweight"), HasSubstr("[512, 47]"),
                                 HasSubstr("expected [512, 48]")));
}

TEST_F(MalformedTensors, AMissingTensorIsNamed) {
  g.erase("qzeros");
  EXPECT_THAT(gptq_error(), AllOf(HasSubstr(name + ".qzeros is missing"),
                                  HasSubstr("present: qweight/scales/g_idx/bias")));
  a.erase("scales");
  EXPECT_THAT(awq_error(), HasSubstr(name + ".scales is missing"));
}

TEST_F(MalformedTensors, AGIdxOutOfRangeIsNamed) {
  auto* v = reinterpret_cast<int32_t*>(g.at("g_idx")->owned.data());
  v[5] = -1;
  EXPECT_THAT(gptq_error(), AllOf(HasSubstr(name + ".g_idx"), HasSubstr("g_idx[5] = -1"),
                                  HasSubstr("outside [0, 4)")));
  v[5] = 9;  // neither indexes the 4 rows of scales nor is a shard's run of groups from 0 on
  EXPECT_THAT(gptq_error(), AllOf(HasSubstr(name + ".g_idx"), HasSubstr("groups 0..9"),
                                  HasSubstr("[4, 384] has 4 group rows")));
}

TEST_F(MalformedTensors, NonContiguousStridesAreRefused) {
  int64_t strides[2] = {1, 64};  // column-major [64, 384]
  g.at("qweight")->t.strides = strides;
  EXPECT_THAT(gptq_error(), AllOf(HasSubstr(name + ".qweight"), HasSubstr("strides [1, 64]"),
                                  HasSubstr("expected a row-major contiguous tensor")));
  int64_t compact[2] = {384, 1};
  g.at("qweight")->t.strides = compact;
  EXPECT_EQ(gptq_error(), "(no error)");
}

TEST_F(MalformedTensors, DeviceMemoryAndMisalignedOffsetsAreRefused) {
  g.at("scales")->t.device = {kDLCUDA, 0};
  EXPECT_THAT(gptq_error(), AllOf(HasSubstr(name + ".scales"), HasSubstr("expected CPU memory")));
  g.at("scales")->t.device = {kDLCUDAHost, 0};  // pinned host memory is CPU memory
  EXPECT_EQ(gptq_error(), "(no error)");
  g.at("qzeros")->t.byte_offset = 2;
  EXPECT_THAT(gptq_error(), AllOf(HasSubstr(name + ".qzeros"), HasSubstr("byte_offset 2"),
                                  HasSubstr("4-byte elements")));
}

TEST_F(MalformedTensors, UnsupportedFormatValuesListTheValidOnes) {
  QuantFormat f = format_of(gptq);
  f.bits = 3;
  EXPECT_THAT(error_of(g, f), AllOf(HasSubstr(name), HasSubstr("bits=3"), HasSubstr("4 or 8")));
  f = format_of(gptq);
  f.method = "exl2";
  EXPECT_THAT(error_of(g, f), AllOf(HasSubstr("method 'exl2'"), HasSubstr("gptq or awq")));
  f = format_of(gptq);
  f.checkpoint_format = "marlin";
  EXPECT_THAT(error_of(g, f), AllOf(HasSubstr("'marlin'"), HasSubstr("gptq or gptq_v2")));
  f = format_of(gptq);
  f.group_size = 0;
  EXPECT_THAT(error_of(g, f), AllOf(HasSubstr("group_size=0"), HasSubstr("a positive size or -1")));
  f = format_of(awq);
  f.bits = 8;
  EXPECT_THAT(error_of(a, f), AllOf(HasSubstr("bits=8"), HasSubstr("AWQ GEMM (expected 4)")));
  f = format_of(awq);
  f.checkpoint_format = "gemv";
  EXPECT_THAT(error_of(a, f), AllOf(HasSubstr("'gemv'"), HasSubstr("expected gemm")));
}

TEST(LinearFromTensors, ARefusedLayerNamesItself) {
  Runtime rt(in_tree("npu_ref"));
  auto ckpt = Checkpoint::open(kFixtures + "/gptq_v1_sym_g128");
  LentLayer l = lend_layer(ckpt, "model.layers.0.self_attn.q_proj");
  l.erase("scales");
  try {
    rt.linear_from_tensors("engine.layer7.qkv", quant_tensors(l), format_of(ckpt));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("engine.layer7.qkv.scales is missing"));
  }
}

}  // namespace
