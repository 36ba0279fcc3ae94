// Checkpoints: the upstream fixtures (layer listing, MoE decode reproducing the expected expert
// outputs), bad directories, sharding, v1 zero 0xF and v1/v2 label cases, dynamic overrides, dense
// layers and both MoE naming styles.
#include <nibble/checkpoint.hpp>
#include <nibble/quantize.hpp>

#include "checkpoint_test_util.hpp"

namespace nibble {
namespace {

using test::error_of;
using test::expect_mentions;

const std::string kQProj = "model.layers.0.self_attn.q_proj";

// Write `layers` encoded by `kind` plus `plain` tensors and config.json text into `dir`.
void write_layers(const std::filesystem::path& dir,
                  const std::map<std::string, CanonicalWeight>& layers, SchemeKind kind,
                  const std::string& config, std::map<std::string, OwnedTensor> plain = {}) {
  for (const auto& [prefix, w] : layers) {
    for (auto& [suffix, t] : get_scheme(kind).encode(w))
      plain[prefix + "." + suffix] = std::move(t);
  }
  write_safetensors(dir / "model.safetensors", plain);
  test::write_text(dir / "config.json", config);
}

std::string gptq_config(int bits, int gs, bool sym, const std::string& format,
                        const std::string& extra = "") {
  return fmt::format(
      R"({{"model_type":"t","quantization_config":{{"quant_method":"gptq","bits":{},"group_size":{},)"
      R"("sym":{},"desc_act":false,"checkpoint_format":"{}"{}}}}})",
      bits, gs, sym ? "true" : "false", format, extra);
}

OwnedTensor f16_random(std::mt19937_64& rng, std::vector<int64_t> shape) {
  OwnedTensor t = OwnedTensor::zeros(DType::F16, std::move(shape));
  std::normal_distribution<float> d(0.f, 0.1f);
  for (size_t i = 0; i < t.data.size() / 2; ++i)
    sdk::store_float(t.data.data(), sdk::dtype_f16(), i, d(rng));
  return t;
}

TEST(Checkpoint, FixturesListTheRightSchemes) {
  auto gptq = Checkpoint::open(test::fixtures_dir() / "gptq_v1_sym_g128");
  auto layers = gptq.linear_layers();
  ASSERT_EQ(layers.size(), 1u);  // input_layernorm (1-D) is not a linear
  const LayerInfo& l = layers[0];
  EXPECT_EQ(l.prefix, kQProj);
  EXPECT_EQ(l.scheme, "gptq_v1");
  EXPECT_EQ(l.K, 512);
  EXPECT_EQ(l.N, 384);
  EXPECT_EQ(l.bits, 4);
  EXPECT_EQ(l.group_size, 128);
  EXPECT_TRUE(l.symmetric);
  EXPECT_TRUE(l.has_bias);
  EXPECT_FALSE(l.act_order);
  EXPECT_EQ(l.dtype, "F16");
  EXPECT_EQ(l.bytes, 64u * 384 * 4 + 4 * 48 * 4 + 4 * 384 * 2 + 512 * 4 + 384 * 2);
  EXPECT_TRUE(gptq.warnings().empty());
  EXPECT_TRUE(gptq.moe_blocks().empty());

  auto moe = Checkpoint::open(test::fixtures_dir() / "moe_gptq_e8_top2");
  auto blocks = moe.moe_blocks();
  ASSERT_EQ(blocks.size(), 1u);
  const MoeInfo& b = blocks[0];
  EXPECT_EQ(b.prefix, "model.layers.0.mlp");
  EXPECT_EQ(b.router_prefix, "model.layers.0.mlp.gate");
  EXPECT_EQ(b.style, MoeStyle::Qwen);
  EXPECT_EQ(b.num_experts, 8);
  EXPECT_EQ(b.hidden, 256);
  EXPECT_EQ(b.intermediate, 384);
  EXPECT_EQ(b.scheme, "gptq_v1");
  EXPECT_EQ(b.w13_group_size, 128);
  EXPECT_EQ(b.w2_group_size, 128);
  EXPECT_EQ(b.top_k, 2);
  EXPECT_TRUE(b.norm_topk_prob);
  EXPECT_EQ(b.scoring, "softmax");
  auto moe_layers = moe.linear_layers();  // experts are listed under the block, the router here
  ASSERT_EQ(moe_layers.size(), 1u);
  EXPECT_EQ(moe_layers[0].prefix, "model.layers.0.mlp.gate");
  EXPECT_EQ(moe_layers[0].scheme, "dense");
  EXPECT_EQ(moe.quant_config()->static_groups, false);  // read from GPTQModel's meta
  EXPECT_TRUE(moe.quant_config()->true_sequential);
}

double silu(double v) { return v / (1 + std::exp(-v)); }

TEST(Checkpoint, MoeFixtureExpertsReproduceExpectedOutputs) {
  auto dir = test::fixtures_dir() / "moe_gptq_e8_top2";
  auto ckpt = Checkpoint::open(dir);
  auto io = SafetensorsFile::open(dir / "io.safetensors");
  const int64_t K = 256, I = 384;
  std::vector<std::pair<CanonicalWeight, CanonicalWeight>> experts;
  for (int e = 0; e < 8; ++e) experts.push_back(ckpt.decode_expert("model.layers.0.mlp", e));
  ASSERT_EQ(experts[0].first.N, 2 * I);
  ASSERT_EQ(experts[0].first.K, K);
  ASSERT_EQ(experts[0].second.N, K);
  ASSERT_EQ(experts[0].second.K, I);
  DenseTensor router = ckpt.dense_weight("model.layers.0.mlp.gate");
  ASSERT_EQ(router.N, 8);
  for (const char* tag : {"", "bf16_"}) {
    for (int M : {1, 7, 33}) {
      auto x = test::as_doubles(io->tensor(fmt::format("x_{}m{}", tag, M)));
      const TensorView& ids = io->tensor(fmt::format("topk_ids_{}m{}", tag, M));
      auto logits_ref = test::as_doubles(io->tensor(fmt::format("router_logits_{}m{}", tag, M)));
      auto out_ref = test::as_doubles(io->tensor(fmt::format("expert_out_{}m{}", tag, M)));
      auto weights = test::as_doubles(io->tensor(fmt::format("topk_weights_{}m{}", tag, M)));
      auto y_ref = test::as_doubles(io->tensor(fmt::format("y_{}m{}", tag, M)));
      std::vector<double> logits(size_t(M * 8)), out(size_t(M * 2 * K)), y(size_t(M * K));
      for (int64_t m = 0; m < M; ++m) {
        for (int64_t e = 0; e < 8; ++e) {
          double acc = 0;
          for (int64_t k = 0; k < K; ++k)
            acc += x[size_t(m * K + k)] * router.weight->as_double(size_t(e * K + k));
          logits[size_t(m * 8 + e)] = acc;
        }
        for (int j = 0; j < 2; ++j) {
          const auto& [w13, w2] = experts[size_t(ids.i32(size_t(m * 2 + j)))];
          std::vector<double> xm(x.begin() + m * K, x.begin() + (m + 1) * K);
          auto h = test::matmul(w13, xm, 1);
          std::vector<double> a(static_cast<size_t>(I));
          for (int64_t i = 0; i < I; ++i) a[size_t(i)] = silu(h[size_t(i)]) * h[size_t(I + i)];
          auto o = test::matmul(w2, a, 1);
          for (int64_t k = 0; k < K; ++k) {
            out[size_t((m * 2 + j) * K + k)] = o[size_t(k)];
            y[size_t(m * K + k)] += weights[size_t(m * 2 + j)] * o[size_t(k)];
          }
        }
      }
      EXPECT_LE(test::rel_error(test::to_f32(logits), logits_ref), 1e-12) << tag << M;
      EXPECT_LE(test::rel_error(test::to_f32(out), out_ref), 1e-12) << tag << M;
      // y mixes in the F32-rounded routing weights, so it matches to float precision only.
      EXPECT_LE(test::rel_error(y, y_ref), 1e-6) << tag << M;
    }
  }
}

TEST(Checkpoint, UpstreamBadDirectories) {
  auto bad = test::data_dir() / "bad";
  expect_mentions(
      error_of([&] { Checkpoint::open(bad / "missing_qzeros"); }),
      {"tensor model.layers.0.self_attn.q_proj.qzeros is missing", "qweight/scales/g_idx"});
  expect_mentions(error_of([&] { Checkpoint::open(bad / "bits3"); }), {"bits=3", "4 and 8"});
  expect_mentions(error_of([&] { Checkpoint::open(bad / "truncated.safetensors"); }),
                  {"truncated", "model.layers.0.self_attn.q_proj.qweight"});
  expect_mentions(error_of([&] { Checkpoint::open(bad); }), {"neither model.safetensors"});
  expect_mentions(error_of([&] { Checkpoint::open(bad / "nothing_here"); }), {"no checkpoint at"});
}

class WrittenCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    std::mt19937_64 rng(21);
    weight_ = test::random_weight(rng, {.bits = 4,
                                        .group_size = 32,
                                        .K = 128,
                                        .N = 48,
                                        .zero_min = 1,
                                        .zero_max = 16,
                                        .bias = true});
  }
  std::map<std::string, OwnedTensor> encoded() const {
    return get_scheme(SchemeKind::GptqV1).encode(weight_);
  }
  void write(const std::map<std::string, OwnedTensor>& layer, const std::string& config) {
    std::map<std::string, OwnedTensor> all;
    for (const auto& [s, t] : layer) all[kQProj + "." + s] = t;
    write_safetensors(dir_ / "model.safetensors", all);
    test::write_text(dir_ / "config.json", config);
  }
  test::TempDir dir_;
  CanonicalWeight weight_;
};

TEST_F(WrittenCheckpoint, ValidOneDecodesBitExact) {
  write(encoded(), gptq_config(4, 32, false, "gptq"));
  auto ckpt = Checkpoint::open(dir_.path());
  test::expect_same_weight(ckpt.decode_linear(kQProj), weight_);
  // A single file path works too, with config.json read beside it.
  test::expect_same_weight(Checkpoint::open(dir_ / "model.safetensors").decode_linear(kQProj),
                           weight_);
  expect_mentions(error_of([&] { ckpt.decode_linear("model.nope"); }),
                  {"no quantized layer model.nope"});
  expect_mentions(error_of([&] { ckpt.dense_weight(kQProj); }), {"is quantized"});
}

TEST_F(WrittenCheckpoint, ShapesContradictingTheConfig) {
  write(encoded(), gptq_config(4, 64, false, "gptq"));
  expect_mentions(
      error_of([&] { Checkpoint::open(dir_.path()); }),
      {kQProj + ".scales", "model.safetensors", "[4, 48]", "expected [2, 48]", "group_size = 64"});
  write(encoded(), gptq_config(8, 32, false, "gptq"));
  expect_mentions(error_of([&] { Checkpoint::open(dir_.path()); }),
                  {kQProj + ".qweight", "[16, 48]", "bits=8", "g_idx [128]", "scales [4, 48]"});
}

TEST_F(WrittenCheckpoint, WrongDtypeAndMissingTensors) {
  auto t = encoded();
  t.at("qzeros").dtype = DType::F32;
  write(t, gptq_config(4, 32, false, "gptq"));
  expect_mentions(error_of([&] { Checkpoint::open(dir_.path()); }),
                  {kQProj + ".qzeros", "dtype F32", "expected I32"});
  t = encoded();
  t.erase("qzeros");
  write(t, gptq_config(4, 32, false, "gptq"));
  expect_mentions(error_of([&] { Checkpoint::open(dir_.path()); }),
                  {kQProj + ".qzeros is missing"});
  t = encoded();
  t.erase("scales");
  write(t, gptq_config(4, 32, false, "gptq"));
  expect_mentions(error_of([&] { Checkpoint::open(dir_.path()); }),
                  {kQProj + ".scales is missing"});
  t = encoded();
  t.erase("qweight");
  write(t, gptq_config(4, 32, false, "gptq"));
  expect_mentions(error_of([&] { Checkpoint::open(dir_.path()); }),
                  {kQProj + ".qweight is missing"});
  write(encoded(), R"({"model_type":"t"})");
  expect_mentions(error_of([&] { Checkpoint::open(dir_.path()); }), {"no quantization config"});
}

TEST_F(WrittenCheckpoint, V1AsymmetricWithStoredF) {
  weight_.zeros[0] = 16;
  weight_.zeros[7] = 16;
  weight_.zeros[9] = 15;
  int64_t expected = std::count(weight_.zeros.begin(), weight_.zeros.end(), 16);
  write(encoded(), gptq_config(4, 32, false, "gptq"));
  auto ckpt = Checkpoint::open(dir_.path());
  auto layers = ckpt.linear_layers();
  ASSERT_EQ(layers.size(), 1u);
  EXPECT_EQ(layers[0].stored_max_zeros, expected);
  ASSERT_EQ(ckpt.warnings().size(), 1u);
  expect_mentions(ckpt.warnings()[0],
                  {kQProj, std::to_string(expected) + " of", "0xf", "16", "#gptq-v1-zero-points"});
  auto w = ckpt.decode_linear(kQProj);
  EXPECT_EQ(w.zeros[0], 16);
  test::expect_same_weight(w, weight_);
}

TEST_F(WrittenCheckpoint, MislabelledV2LoadsAsV2WithAWarning) {
  std::mt19937_64 rng(22);
  weight_ = test::random_weight(rng, {.bits = 4, .group_size = 32, .K = 128, .N = 48, .sym = true});
  write(get_scheme(SchemeKind::GptqV2).encode(weight_), gptq_config(4, 32, true, "gptq"));
  auto ckpt = Checkpoint::open(dir_.path());
  EXPECT_EQ(ckpt.linear_layers()[0].scheme, "gptq_v2");
  EXPECT_TRUE(ckpt.linear_layers()[0].symmetric);
  ASSERT_EQ(ckpt.warnings().size(), 1u);
  expect_mentions(ckpt.warnings()[0], {"gptq_v2", kQProj});
  test::expect_same_weight(ckpt.decode_linear(kQProj), weight_);
  // Read as v1 it would be shifted by one step: the relabel matters.
  write(get_scheme(SchemeKind::GptqV1).encode(weight_), gptq_config(4, 32, true, "gptq"));
  auto v1 = Checkpoint::open(dir_.path());
  EXPECT_EQ(v1.linear_layers()[0].scheme, "gptq_v1");
  EXPECT_TRUE(v1.warnings().empty());
  test::expect_same_weight(v1.decode_linear(kQProj), weight_);
}

TEST(Checkpoint, ShardedCheckpoint) {
  test::TempDir dir;
  std::mt19937_64 rng(23);
  QuantizedModel model;
  for (int i = 0; i < 4; ++i) {
    model.quantized[fmt::format("model.layers.{}.mlp.down_proj", i)] =
        test::random_weight(rng, {.bits = 4, .group_size = 64, .K = 128, .N = 64, .sym = true});
  }
  model.plain["model.norm.weight"] = f16_random(rng, {128});
  QuantizeOptions o;
  o.group_size = 64;
  write_checkpoint(dir.path(), model, SchemeKind::GptqV2, o, /*shard_bytes=*/6000);
  EXPECT_TRUE(std::filesystem::exists(dir / "model.safetensors.index.json"));
  EXPECT_FALSE(std::filesystem::exists(dir / "model.safetensors"));
  auto ckpt = Checkpoint::open(dir.path());
  EXPECT_GT(ckpt.tensors().files().size(), 2u);
  ASSERT_EQ(ckpt.linear_layers().size(), 4u);
  for (const auto& [prefix, w] : model.quantized)
    test::expect_same_weight(ckpt.decode_linear(prefix), w);
}

TEST(Checkpoint, DynamicOverridesAndDenseModules) {
  test::TempDir dir;
  std::mt19937_64 rng(24);
  auto w4 = test::random_weight(rng, {.bits = 4, .group_size = 32, .K = 64, .N = 16, .sym = true});
  auto w8 = test::random_weight(
      rng, {.bits = 8, .group_size = 16, .K = 64, .N = 16, .sym = false, .zero_max = 200});
  std::map<std::string, OwnedTensor> plain;
  for (auto& [s, t] : get_scheme(SchemeKind::GptqV2).encode(w4))
    plain["model.layers.0.mlp.up_proj." + s] = t;
  for (auto& [s, t] : get_scheme(SchemeKind::GptqV2).encode(w8))
    plain["model.layers.1.mlp.up_proj." + s] = t;
  plain["model.layers.0.mlp.skipped.weight"] = f16_random(rng, {16, 64});
  plain["model.layers.0.mlp.skipped.bias"] = f16_random(rng, {16});
  plain["model.embed_tokens.weight"] = f16_random(rng, {100, 64});
  plain["lm_head.weight"] = f16_random(rng, {100, 64});
  write_safetensors(dir / "model.safetensors", plain);
  test::write_text(
      dir / "config.json",
      gptq_config(
          4, 32, true, "gptq_v2",
          R"(,"lm_head":true,"dynamic":{"-:.*skipped":{},".*layers\\.1\\.":{"bits":8,"group_size":16,"sym":false}})"));
  auto ckpt = Checkpoint::open(dir.path());
  auto layers = ckpt.linear_layers();
  ASSERT_EQ(layers.size(), 4u);  // lm_head, 2 quantized, 1 dense; embeddings excluded
  EXPECT_EQ(layers[0].prefix, "lm_head");
  EXPECT_EQ(layers[0].scheme, "dense");
  EXPECT_EQ(layers[1].prefix, "model.layers.0.mlp.skipped");
  EXPECT_EQ(layers[1].kind, LayerKind::Dense);
  EXPECT_TRUE(layers[1].has_bias);
  EXPECT_EQ(layers[2].bits, 4);
  EXPECT_EQ(layers[3].bits, 8);
  EXPECT_EQ(layers[3].group_size, 16);
  expect_mentions(layers[3].note, {"dynamic rule"});
  test::expect_same_weight(ckpt.decode_linear("model.layers.1.mlp.up_proj"), w8);
  test::expect_same_weight(ckpt.decode_linear("model.layers.0.mlp.up_proj"), w4);
  DenseTensor d = ckpt.dense_weight("model.layers.0.mlp.skipped");
  auto view = d.view();
  EXPECT_EQ(view.K, 64);
  EXPECT_EQ(view.N, 16);
  EXPECT_EQ(view.data, static_cast<const void*>(d.weight->data));
  EXPECT_EQ(
      std::memcmp(view.data, plain["model.layers.0.mlp.skipped.weight"].data.data(), 16 * 64 * 2),
      0);
  EXPECT_NE(view.bias, nullptr);
  // lm_head: true but a dense lm_head is stored: the user is told.
  ASSERT_EQ(ckpt.warnings().size(), 1u);
  expect_mentions(ckpt.warnings()[0], {"lm_head"});
}

TEST(Checkpoint, QuantizedLayersListedAsNotConvertedAreReportedOnce) {
  test::TempDir dir;
  std::mt19937_64 rng(27);
  std::map<std::string, CanonicalWeight> layers;
  for (int e = 0; e < 3; ++e) {
    layers[fmt::format("model.layers.{}.mlp.gate_proj", e)] =
        test::random_weight(rng, {.bits = 4, .group_size = 32, .K = 64, .N = 16});
  }
  const std::string config =
      R"({"quantization_config":{"quant_method":"awq","bits":4,"group_size":32,"version":"gemm","modules_to_not_convert":["gate"]}})";
  write_layers(dir.path(), layers, SchemeKind::AwqGemm, config);
  // Three plain linears that the substring "gate" matches, as AWQ readers match it.
  auto ckpt = Checkpoint::open(dir.path());
  ASSERT_EQ(ckpt.warnings().size(), 1u);
  expect_mentions(ckpt.warnings()[0], {"3 layer(s)", "modules_to_not_convert contains \"gate\"",
                                       "model.layers.0.mlp.gate_proj"});
  test::expect_same_weight(ckpt.decode_linear("model.layers.1.mlp.gate_proj"),
                           layers["model.layers.1.mlp.gate_proj"]);
}

TEST(Checkpoint, QuantizedLmHead) {
  test::TempDir dir;
  std::mt19937_64 rng(26);
  std::map<std::string, CanonicalWeight> layers{
      {"lm_head",
       test::random_weight(rng, {.bits = 8, .group_size = 64, .K = 64, .N = 96, .sym = true})}};
  write_layers(dir.path(), layers, SchemeKind::GptqV2,
               gptq_config(8, 64, true, "gptq_v2", R"(,"lm_head":true)"));
  auto ckpt = Checkpoint::open(dir.path());
  ASSERT_EQ(ckpt.linear_layers().size(), 1u);
  EXPECT_EQ(ckpt.linear_layers()[0].kind, LayerKind::Quantized);
  EXPECT_TRUE(ckpt.warnings().empty());
  test::expect_same_weight(ckpt.decode_linear("lm_head"), layers["lm_head"]);
  // The same file under lm_head: false still decodes, and the contradiction is reported.
  write_layers(dir.path(), layers, SchemeKind::GptqV2, gptq_config(8, 64, true, "gptq_v2"));
  auto other = Checkpoint::open(dir.path());
  ASSERT_EQ(other.warnings().size(), 1u);
  expect_mentions(other.warnings()[0], {"lm_head: false", "quantized lm_head"});
}

// A Mixtral-style block written by hand: w1/w3/w2 names, router block_sparse_moe.gate.
TEST(Checkpoint, MixtralStyleMoeAndItsErrors) {
  test::TempDir dir;
  std::mt19937_64 rng(25);
  const std::string block = "model.layers.0.block_sparse_moe";
  std::map<std::string, CanonicalWeight> layers;
  for (int e = 0; e < 3; ++e) {
    for (const char* p : {"w1", "w3"}) {
      layers[fmt::format("{}.experts.{}.{}", block, e, p)] =
          test::random_weight(rng, {.bits = 4, .group_size = 32, .K = 64, .N = 40, .zero_min = 1});
    }
    layers[fmt::format("{}.experts.{}.w2", block, e)] =
        test::random_weight(rng, {.bits = 4, .group_size = 8, .K = 40, .N = 64, .zero_min = 1});
  }
  std::map<std::string, OwnedTensor> plain{{block + ".gate.weight", f16_random(rng, {3, 64})}};
  // The global group size (32) fits w1/w3; w2 uses 8 through a dynamic rule.
  const std::string config =
      R"({"num_local_experts":3,"num_experts_per_tok":2,"hidden_size":64,"intermediate_size":40,"quantization_config":)"
      R"({"quant_method":"gptq","bits":4,"group_size":32,"sym":false,"dynamic":{".*\\.w2$":{"group_size":8}}}})";
  write_layers(dir.path(), layers, SchemeKind::GptqV1, config, plain);
  auto ckpt = Checkpoint::open(dir.path());
  auto blocks = ckpt.moe_blocks();
  ASSERT_EQ(blocks.size(), 1u);
  EXPECT_EQ(blocks[0].style, MoeStyle::Mixtral);
  EXPECT_EQ(blocks[0].prefix, block);
  EXPECT_EQ(blocks[0].num_experts, 3);
  EXPECT_EQ(blocks[0].w13_group_size, 32);
  EXPECT_EQ(blocks[0].w2_group_size, 8);
  EXPECT_TRUE(blocks[0].norm_topk_prob);  // Mixtral renormalises
  auto [w13, w2] = ckpt.decode_expert(block, 2);
  const auto& gate = layers[block + ".experts.2.w1"];
  const auto& up = layers[block + ".experts.2.w3"];
  for (int64_t n = 0; n < 40; ++n) {
    for (int64_t k = 0; k < 64; k += 7) {
      EXPECT_EQ(w13.dequant(n, k), gate.dequant(n, k));
      EXPECT_EQ(w13.dequant(40 + n, k), up.dequant(n, k));
    }
  }
  test::expect_same_weight(w2, layers[block + ".experts.2.w2"]);
  expect_mentions(error_of([&] { ckpt.decode_expert(block, 3); }), {"expert 3", "outside [0, 3)"});

  // Config sizes that contradict the tensors.
  write_layers(
      dir.path(), layers, SchemeKind::GptqV1,
      R"({"num_local_experts":4,"quantization_config":{"quant_method":"gptq","bits":4,"group_size":32,"sym":false,"dynamic":{".*\\.w2$":{"group_size":8}}}})",
      plain);
  expect_mentions(error_of([&] { Checkpoint::open(dir.path()); }),
                  {"num_local_experts = 4", block, "3"});
  // No router.
  write_layers(dir.path(), layers, SchemeKind::GptqV1, config);
  expect_mentions(error_of([&] { Checkpoint::open(dir.path()); }),
                  {"no router tensor", block + ".gate.weight"});
  // A missing projection.
  auto missing = layers;
  missing.erase(block + ".experts.1.w3");
  write_layers(dir.path(), missing, SchemeKind::GptqV1, config, plain);
  expect_mentions(error_of([&] { Checkpoint::open(dir.path()); }), {"expert 1 has no w3"});
}

}  // namespace
}  // namespace nibble
