// The round-to-nearest quantizer, synthetic models written in every format and read back
// bit-exactly, and quantizing an f32 checkpoint.
#include <nibble/checkpoint.hpp>
#include <nibble/quantize.hpp>

#include "checkpoint_test_util.hpp"

namespace nibble {
namespace {

using test::error_of;
using test::expect_mentions;

std::vector<float> normal(std::mt19937_64& rng, size_t n, double sd) {
  std::normal_distribution<double> d(0, sd);
  std::vector<float> v(n);
  for (float& x : v) x = float(d(rng));
  return v;
}

struct RtnCase {
  int bits, group_size;
  bool sym, act_order;
  int min_zero;
};

class Rtn : public ::testing::TestWithParam<RtnCase> {};

TEST_P(Rtn, ErrorWithinOneStepAndGroupsWellFormed) {
  const RtnCase c = GetParam();
  const int64_t N = 24, K = 200;
  std::mt19937_64 rng(31);
  auto w = normal(rng, size_t(N * K), 1.0 / std::sqrt(double(K)));
  QuantizeOptions o{.bits = c.bits,
                    .group_size = c.group_size,
                    .sym = c.sym,
                    .act_order = c.act_order,
                    .min_zero = c.min_zero};
  CanonicalWeight q = quantize_rtn(w, N, K, o, rng);
  validate(q, "rtn");
  EXPECT_EQ(q.symmetric(), c.sym);
  EXPECT_EQ(q.g_idx.empty(), !c.act_order || c.group_size == -1);
  for (uint8_t z : q.zeros) EXPECT_GE(z, c.min_zero);
  double sq_err = 0, sq = 0;
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t k = 0; k < K; ++k) {
      double s = q.scale(q.group_of(k), n);
      double err = std::abs(q.dequant(n, k) - w[size_t(n * K + k)]);
      ASSERT_LE(err, s * 1.0001) << n << "," << k;  // at most one step (clamping at the edge)
      sq_err += err * err;
      sq += double(w[size_t(n * K + k)]) * w[size_t(n * K + k)];
    }
  }
  EXPECT_LT(std::sqrt(sq_err / sq), c.bits == 4 ? 0.15 : 0.01);
  if (!q.g_idx.empty()) {
    // Groups formed along a permutation: every group has group_size members (the last: the rest).
    std::vector<int> count(size_t(q.num_groups));
    for (int32_t g : q.g_idx) ++count[size_t(g)];
    for (int64_t g = 0; g < q.num_groups; ++g) {
      EXPECT_EQ(count[size_t(g)], std::min<int64_t>(c.group_size, K - g * c.group_size));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Options, Rtn,
    ::testing::Values(RtnCase{4, 32, true, false, 0}, RtnCase{4, 32, false, false, 0},
                      RtnCase{4, 48, false, true, 1}, RtnCase{8, 64, true, true, 0},
                      RtnCase{8, -1, false, false, 0}, RtnCase{4, -1, true, true, 0}),
    [](const ::testing::TestParamInfo<RtnCase>& info) {
      const RtnCase& c = info.param;
      return fmt::format("{}bit_g{}_{}{}_minzero{}", c.bits,
                         c.group_size == -1 ? std::string("all") : std::to_string(c.group_size),
                         c.sym ? "sym" : "asym", c.act_order ? "_actorder" : "", c.min_zero);
    });

TEST(Quantize, RefusesInvalidOptions) {
  std::mt19937_64 rng(32);
  std::vector<float> w(64, 0.5f);
  expect_mentions(error_of([&] { quantize_rtn(w, 8, 8, {.bits = 3}, rng); }), {"bits=3"});
  expect_mentions(error_of([&] { quantize_rtn(w, 8, 8, {.group_size = 0}, rng); }),
                  {"group_size=0"});
  expect_mentions(error_of([&] { quantize_rtn(w, 8, 9, {}, rng); }), {"64 values", "8*9"});
  SyntheticSpec spec;
  spec.layers = {{64, 16}};
  expect_mentions(error_of([&] { make_synthetic_model(spec, {.sym = true}, SchemeKind::AwqGemm); }),
                  {"--asym"});
  expect_mentions(error_of([&] {
                    make_synthetic_model(spec, {.sym = false, .act_order = true},
                                         SchemeKind::AwqGemm);
                  }),
                  {"act-order"});
  spec.layers = {{100, 16}};
  expect_mentions(error_of([&] { make_synthetic_model(spec, {}, SchemeKind::GptqV1); }),
                  {"K % 8", "K = 100"});
}

struct SyntheticCase {
  SchemeKind format;
  QuantizeOptions options;
};

class Synthetic : public ::testing::TestWithParam<SyntheticCase> {};

TEST_P(Synthetic, WrittenCheckpointDecodesToTheQuantizedWeights) {
  const SyntheticCase c = GetParam();
  SyntheticSpec spec{
      .layers = {{256, 64}, {200, 72}},
      .moe = SyntheticMoe{.num_experts = 4, .hidden = 128, .intermediate = 96, .top_k = 2},
      .bias = true,
      .seed = 7};
  if (c.format == SchemeKind::AwqGemm) spec.layers.push_back({100, 24});  // AWQ: any K
  QuantizedModel model = make_synthetic_model(spec, c.options, c.format);
  test::TempDir dir;
  write_checkpoint(dir.path(), model, c.format, c.options);
  auto ckpt = Checkpoint::open(dir.path());
  EXPECT_TRUE(ckpt.warnings().empty()) << ckpt.warnings().front();
  auto layers = ckpt.linear_layers();
  ASSERT_EQ(layers.size(), spec.layers.size() + 1);  // + the router
  for (const auto& l : layers) {
    if (l.kind == LayerKind::Dense) {
      EXPECT_EQ(l.prefix, "model.layers." + std::to_string(spec.layers.size()) + ".mlp.gate");
      continue;
    }
    EXPECT_EQ(l.scheme, std::string(scheme_name(c.format)));
    EXPECT_EQ(l.symmetric, c.options.sym);
    EXPECT_EQ(l.act_order, c.options.act_order && c.options.group_size != -1);
    test::expect_same_weight(ckpt.decode_linear(l.prefix), model.quantized.at(l.prefix));
  }
  auto blocks = ckpt.moe_blocks();
  ASSERT_EQ(blocks.size(), 1u);
  EXPECT_EQ(blocks[0].num_experts, 4);
  EXPECT_EQ(blocks[0].top_k, 2);
  EXPECT_EQ(blocks[0].hidden, 128);
  EXPECT_EQ(blocks[0].intermediate, 96);
  auto [w13, w2] = ckpt.decode_expert(blocks[0].prefix, 3);
  test::expect_same_weight(w2, model.quantized.at(blocks[0].prefix + ".experts.3.down_proj"));
  EXPECT_EQ(w13.N, 192);
  // Same seed, same model.
  QuantizedModel again = make_synthetic_model(spec, c.options, c.format);
  test::expect_same_weight(again.quantized.begin()->second, model.quantized.begin()->second);
}

INSTANTIATE_TEST_SUITE_P(
    Formats, Synthetic,
    ::testing::Values(
        SyntheticCase{SchemeKind::GptqV1, {.bits = 4, .group_size = 32, .sym = true}},
        SyntheticCase{SchemeKind::GptqV1,
                      {.bits = 4, .group_size = 64, .sym = false, .act_order = true}},
        SyntheticCase{SchemeKind::GptqV2, {.bits = 4, .group_size = -1, .sym = false}},
        SyntheticCase{SchemeKind::GptqV2,
                      {.bits = 8, .group_size = 32, .sym = false, .act_order = true}},
        SyntheticCase{SchemeKind::GptqV1, {.bits = 8, .group_size = 128, .sym = true}},
        SyntheticCase{SchemeKind::AwqGemm, {.bits = 4, .group_size = 32, .sym = false}}),
    [](const ::testing::TestParamInfo<SyntheticCase>& info) {
      const QuantizeOptions& o = info.param.options;
      return fmt::format("{}_{}_{}bit_g{}_{}{}", info.index, scheme_name(info.param.format), o.bits,
                         o.group_size == -1 ? std::string("all") : std::to_string(o.group_size),
                         o.sym ? "sym" : "asym", o.act_order ? "_actorder" : "");
    });

TEST(Quantize, AnF32CheckpointBecomesGptq) {
  test::TempDir in, out;
  std::mt19937_64 rng(33);
  std::map<std::string, OwnedTensor> t;
  auto f32 = [&](std::vector<int64_t> shape) {
    OwnedTensor x = OwnedTensor::zeros(DType::F32, shape);
    auto v = normal(rng, x.data.size() / 4, 0.05);
    std::memcpy(x.data.data(), v.data(), x.data.size());
    return x;
  };
  t["model.embed_tokens.weight"] = f32({50, 64});
  t["model.layers.0.self_attn.q_proj.weight"] = f32({64, 64});
  t["model.layers.0.self_attn.q_proj.bias"] = f32({64});
  t["model.layers.0.self_attn.o_proj.weight"] = f32({64, 20});  // K = 20: GPTQ cannot pack it
  t["model.layers.0.input_layernorm.weight"] = f32({64});
  t["model.layers.1.mlp.gate.weight"] = f32({2, 64});
  for (int e = 0; e < 2; ++e) {
    t[fmt::format("model.layers.1.mlp.experts.{}.gate_proj.weight", e)] = f32({32, 64});
    t[fmt::format("model.layers.1.mlp.experts.{}.up_proj.weight", e)] = f32({32, 64});
    t[fmt::format("model.layers.1.mlp.experts.{}.down_proj.weight", e)] = f32({64, 32});
  }
  t["lm_head.weight"] = f32({50, 64});
  write_safetensors(in / "model.safetensors", t);
  test::write_text(in / "config.json", R"({"model_type":"toy","num_experts_per_tok":1})");
  QuantizeOptions o{.bits = 4, .group_size = 32, .sym = false, .act_order = true};
  QuantizedModel model = quantize_checkpoint(in.path(), o, SchemeKind::GptqV2);
  EXPECT_EQ(model.quantized.size(), 7u);  // q_proj + 2 experts x 3
  ASSERT_EQ(model.modules_to_not_convert,
            std::vector<std::string>{"model.layers.0.self_attn.o_proj"});
  write_checkpoint(out.path(), model, SchemeKind::GptqV2, o);
  auto ckpt = Checkpoint::open(out.path());
  EXPECT_TRUE(ckpt.warnings().empty());
  auto layers = ckpt.linear_layers();
  ASSERT_EQ(layers.size(), 4u);  // lm_head, router, o_proj dense; q_proj quantized
  EXPECT_EQ(layers[0].prefix, "lm_head");
  EXPECT_EQ(layers[1].prefix, "model.layers.0.self_attn.o_proj");
  EXPECT_EQ(layers[1].scheme, "dense");
  EXPECT_EQ(layers[2].prefix, "model.layers.0.self_attn.q_proj");
  EXPECT_EQ(layers[2].scheme, "gptq_v2");
  EXPECT_EQ(layers[3].scheme, "dense");
  EXPECT_EQ(ckpt.moe_blocks().at(0).top_k, 1);
  EXPECT_TRUE(ckpt.moe_blocks().at(0).act_order);
  EXPECT_NO_THROW(ckpt.decode_expert("model.layers.1.mlp", 1));  // gate and up share their g_idx
  auto q = ckpt.decode_linear("model.layers.0.self_attn.q_proj");
  const TensorView src = t["model.layers.0.self_attn.q_proj.weight"].view("src");
  for (int64_t n = 0; n < 64; ++n) {
    for (int64_t k = 0; k < 64; ++k)
      ASSERT_LE(std::abs(q.dequant(n, k) - src.as_double(size_t(n * 64 + k))),
                q.scale(q.group_of(k), n) * 1.0001);
  }
  EXPECT_EQ(q.bias_dtype.bits, 32);  // the checkpoint's bias kept as it was
  EXPECT_NE(ckpt.tensors().find("model.embed_tokens.weight"), nullptr);
  EXPECT_NE(ckpt.tensors().find("model.layers.0.input_layernorm.weight"), nullptr);
  expect_mentions(error_of([&] { quantize_checkpoint(out.path(), o, SchemeKind::GptqV2); }),
                  {"already quantized"});
}

}  // namespace
}  // namespace nibble
