// AWQ GEMM scheme: the interleaved nibble order, bit-exact round trips (ragged shapes included),
// refusals, and the AutoAWQ fixture.
#include <nibble/checkpoint.hpp>
#include <nibble/checkpoint_scheme.hpp>

#include "checkpoint_test_util.hpp"

namespace nibble {
namespace {

using test::Encoded;
using test::error_of;
using test::expect_mentions;

TEST(AwqGemm, InterleavedNibbleOrder) {
  // Row k = 0 holds columns 0..7 as values 1..8: nibble p must hold column ORDER[p].
  CanonicalWeight w;
  w.bits = 4;
  w.group_size = -1;
  w.K = 1;
  w.N = 8;
  w.num_groups = 1;
  w.q = {1, 2, 3, 4, 5, 6, 7, 8};
  w.zeros = {9, 10, 11, 12, 13, 14, 15, 0};
  w.scales.assign(16, 0);
  for (int n = 0; n < 8; ++n)
    sdk::store_float(w.scales.data(), w.scales_dtype, size_t(n), 0.5f + n);
  Encoded enc(get_scheme(SchemeKind::AwqGemm).encode(w), "awq");
  const int order[8] = {0, 2, 4, 6, 1, 3, 5, 7};
  uint32_t qword = uint32_t(enc.views["qweight"].i32(0));
  uint32_t zword = uint32_t(enc.views["qzeros"].i32(0));
  for (int p = 0; p < 8; ++p) {
    EXPECT_EQ((qword >> (4 * p)) & 0xF, w.q[size_t(order[p])]) << p;
    EXPECT_EQ((zword >> (4 * p)) & 0xF, w.zeros[size_t(order[p])]) << p;
  }
  EXPECT_EQ(qword, 0x86427531u);
}

struct AwqCase {
  int group_size;
  int64_t K, N;
};

class AwqRoundTrip : public ::testing::TestWithParam<AwqCase> {};

TEST_P(AwqRoundTrip, DecodeOfEncodeIsBitExact) {
  const AwqCase c = GetParam();
  std::mt19937_64 rng(uint64_t(c.K * 1000 + c.N + c.group_size));
  CanonicalWeight w =
      test::random_weight(rng, {.bits = 4,
                                .group_size = c.group_size,
                                .K = c.K,
                                .N = c.N,
                                .zero_min = 0,
                                .zero_max = 15,
                                .scales_dtype = c.K % 2 ? sdk::dtype_bf16() : sdk::dtype_f16(),
                                .bias = c.N % 16 == 0});
  Encoded enc(get_scheme(SchemeKind::AwqGemm).encode(w), "awq");
  EXPECT_EQ(enc.tensors.at("qweight").shape, (std::vector<int64_t>{c.K, c.N / 8}));
  EXPECT_EQ(enc.tensors.count("g_idx"), 0u);
  CanonicalWeight back =
      get_scheme(SchemeKind::AwqGemm).decode(enc.layer, {4, c.group_size, false});
  test::expect_same_weight(back, w);
}

// AWQ packs along N only: K needs no alignment (100, 37), N a multiple of 8.
INSTANTIATE_TEST_SUITE_P(Shapes, AwqRoundTrip,
                         ::testing::Values(AwqCase{128, 256, 64}, AwqCase{32, 100, 24},
                                           AwqCase{-1, 37, 40}, AwqCase{64, 200, 72},
                                           AwqCase{48, 200, 8}),
                         [](const ::testing::TestParamInfo<AwqCase>& info) {
                           return fmt::format("g{}_K{}_N{}",
                                              info.param.group_size == -1
                                                  ? std::string("all")
                                                  : std::to_string(info.param.group_size),
                                              info.param.K, info.param.N);
                         });

TEST(AwqGemm, RefusesWhatItCannotHold) {
  std::mt19937_64 rng(9);
  auto w = test::random_weight(rng, {.bits = 4, .group_size = 32, .K = 64, .N = 20});
  expect_mentions(error_of([&] { get_scheme(SchemeKind::AwqGemm).encode(w); }),
                  {"N must be a multiple of 8"});
  w = test::random_weight(rng, {.bits = 4, .group_size = 32, .K = 64, .N = 16, .act_order = true});
  expect_mentions(error_of([&] { get_scheme(SchemeKind::AwqGemm).encode(w); }), {"act-order"});
  w = test::random_weight(rng, {.bits = 8, .group_size = 32, .K = 64, .N = 16});
  expect_mentions(error_of([&] { get_scheme(SchemeKind::AwqGemm).encode(w); }),
                  {"bits=8", "supports 4"});
  w = test::random_weight(
      rng, {.bits = 4, .group_size = 32, .K = 64, .N = 16, .zero_min = 1, .zero_max = 16});
  w.zeros[0] = 16;
  expect_mentions(error_of([&] { get_scheme(SchemeKind::AwqGemm).encode(w); }), {"zero point 16"});
}

TEST(AwqGemm, DecodeChecksShapesAndRefusesGIdx) {
  std::mt19937_64 rng(10);
  auto w = test::random_weight(rng, {.bits = 4, .group_size = 32, .K = 64, .N = 16});
  Encoded enc(get_scheme(SchemeKind::AwqGemm).encode(w), "awq");
  expect_mentions(error_of([&] {
                    get_scheme(SchemeKind::AwqGemm).decode(enc.layer, {4, 16, false});
                  }),
                  {"awq.scales", "[2, 16]", "expected [4, 16]"});
  expect_mentions(error_of([&] {
                    get_scheme(SchemeKind::AwqGemm).decode(enc.layer, {8, 32, false});
                  }),
                  {"bits=8", "AWQ GEMM"});
  auto with_gidx = enc.tensors;
  with_gidx["g_idx"] = OwnedTensor::zeros(DType::I32, {64});
  Encoded g(with_gidx, "awq");
  expect_mentions(error_of([&] {
                    get_scheme(SchemeKind::AwqGemm).decode(g.layer, {4, 32, false});
                  }),
                  {"awq.g_idx", "no act-order"});
}

TEST(AwqGemm, UpstreamFixtureReproducesExpectedOutputs) {
  auto dir = test::fixtures_dir() / "awq_gemm_g128";
  Checkpoint ckpt = Checkpoint::open(dir);
  auto layers = ckpt.linear_layers();
  ASSERT_EQ(layers.size(), 1u);
  EXPECT_EQ(layers[0].scheme, "awq_gemm");
  CanonicalWeight w = ckpt.decode_linear("model.layers.0.self_attn.q_proj");
  ASSERT_EQ(w.K, 512);
  ASSERT_EQ(w.N, 384);
  auto io = SafetensorsFile::open(dir / "io.safetensors");
  EXPECT_EQ(test::dequant_mismatches(w, io->tensor("w_dequant")), 0);
  const TensorView& zeros = io->tensor("zeros");
  int distinct_zero_values = 0;
  std::vector<bool> seen(16);
  for (int64_t i = 0; i < w.num_groups * w.N; ++i) {
    ASSERT_EQ(int(w.zeros[size_t(i)]), zeros.i32(size_t(i)));
    if (!seen[w.zeros[size_t(i)]]) seen[w.zeros[size_t(i)]] = true, ++distinct_zero_values;
  }
  EXPECT_GT(distinct_zero_values, 3);  // asymmetric: the interleave is really exercised
  for (const char* tag : {"", "bf16_"}) {
    for (int M : {1, 7, 33}) {
      auto x = test::as_doubles(io->tensor(fmt::format("x_{}m{}", tag, M)));
      auto ref = test::as_doubles(io->tensor(fmt::format("y_{}m{}", tag, M)));
      auto y = test::matmul(w, x, M);
      EXPECT_LE(test::rel_error(test::to_f32(y), ref), 1e-12) << tag << M;
    }
  }
}

}  // namespace
}  // namespace nibble
