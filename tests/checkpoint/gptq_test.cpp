// GPTQ scheme: bit-exact round trips (v1/v2, 4/8 bits, group sizes, sym/asym, act-order, ragged
// shapes), the v1 zero conventions (docs/formats.md#gptq-v1-zero-points, #v1-or-v2), refusals, and
// the AutoGPTQ fixture.
#include <nibble/checkpoint.hpp>
#include <nibble/checkpoint_scheme.hpp>

#include <gmock/gmock.h>

#include "checkpoint_test_util.hpp"

namespace nibble {
namespace {

using test::Encoded;
using test::error_of;
using test::expect_mentions;

struct RoundTripCase {
  SchemeKind kind;
  int bits;
  int group_size;
  bool sym;
  bool act_order;
  int64_t K, N;
};

class GptqRoundTrip : public ::testing::TestWithParam<RoundTripCase> {};

TEST_P(GptqRoundTrip, DecodeOfEncodeIsBitExact) {
  const RoundTripCase c = GetParam();
  std::mt19937_64 rng(c.K * 131 + c.N * 7 + c.bits + c.group_size);
  test::RandomWeightSpec spec;
  spec.bits = c.bits;
  spec.group_size = c.group_size;
  spec.K = c.K;
  spec.N = c.N;
  spec.sym = c.sym;
  spec.act_order = c.act_order;
  const int maxq = (1 << c.bits) - 1;
  // v1 stores zero - 1: effective zeros 1 .. 2^bits for 4-bit (16 included), 1 .. 255 for 8.
  spec.zero_min = c.kind == SchemeKind::GptqV1 ? 1 : 0;
  spec.zero_max = c.kind == SchemeKind::GptqV1 ? std::min(maxq + 1, 255) : maxq;
  spec.bias = c.K % 16 == 0;
  spec.scales_dtype = c.N % 16 == 0 ? sdk::dtype_f16() : sdk::dtype_bf16();
  CanonicalWeight w = test::random_weight(rng, spec);
  const Scheme& scheme = get_scheme(c.kind);
  Encoded enc(scheme.encode(w));
  ASSERT_EQ(enc.tensors.at("qweight").shape, (std::vector<int64_t>{c.K * c.bits / 32, c.N}));
  ASSERT_EQ(enc.tensors.at("qzeros").shape,
            (std::vector<int64_t>{w.num_groups, c.N * c.bits / 32}));
  CanonicalWeight back = scheme.decode(enc.layer, {c.bits, c.group_size, c.sym});
  test::expect_same_weight(back, w);
  EXPECT_EQ(back.symmetric(), c.sym);
  if (c.act_order) {
    EXPECT_FALSE(back.g_idx.empty());
  }
}

std::vector<RoundTripCase> round_trip_cases() {
  std::vector<RoundTripCase> cases;
  for (SchemeKind kind : {SchemeKind::GptqV1, SchemeKind::GptqV2}) {
    for (int bits : {4, 8}) {
      for (int gs : {32, 128, -1, 48}) {
        for (bool sym : {true, false}) {
          cases.push_back({kind, bits, gs, sym, false, 256, 64});
          // Ragged: K and N multiples of the packing (8) but not of 32; 48 does not divide K.
          cases.push_back({kind, bits, gs, sym, gs != -1, 200, 72});
        }
      }
    }
    cases.push_back({kind, 4, 16, false, true, 136, 24});
    cases.push_back({kind, 8, 8, true, true, 44, 12});  // 8-bit packs 4 per word: K, N % 4
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(AllVariants, GptqRoundTrip, ::testing::ValuesIn(round_trip_cases()),
                         [](const ::testing::TestParamInfo<RoundTripCase>& info) {
                           const RoundTripCase& c = info.param;
                           return fmt::format("{}_{}_{}bit_g{}_{}{}_K{}_N{}", info.index,
                                              scheme_name(c.kind), c.bits,
                                              c.group_size == -1 ? std::string("all")
                                                                 : std::to_string(c.group_size),
                                              c.sym ? "sym" : "asym",
                                              c.act_order ? "_actorder" : "", c.K, c.N);
                         });

TEST(Gptq, V1DecodesStoredNibbleFUnmaskedAsSixteen) {
  std::mt19937_64 rng(1);
  CanonicalWeight w = test::random_weight(
      rng, {.bits = 4, .group_size = 32, .K = 64, .N = 16, .zero_min = 1, .zero_max = 16});
  w.zeros[0] = 16;  // stored as 0xF in v1
  w.zeros[5] = 1;   // stored as 0
  Encoded enc(get_scheme(SchemeKind::GptqV1).encode(w));
  EXPECT_EQ(uint32_t(enc.views["qzeros"].i32(0)) & 0xF, 0xFu);
  CanonicalWeight back = get_scheme(SchemeKind::GptqV1).decode(enc.layer, {4, 32, false});
  EXPECT_EQ(back.zeros[0], 16);
  EXPECT_EQ(back.zeros[5], 1);
  // The dequantized value uses 16, not 0 (AutoGPTQ's masked reading would give 0).
  EXPECT_EQ(back.dequant(0, 0), (int(back.q[0]) - 16) * back.scale(0, 0));
}

TEST(Gptq, V2StoresZeroAsIsAndV1MinusOne) {
  std::mt19937_64 rng(2);
  CanonicalWeight w = test::random_weight(
      rng, {.bits = 4, .group_size = -1, .K = 16, .N = 8, .zero_min = 3, .zero_max = 3});
  Encoded v1(get_scheme(SchemeKind::GptqV1).encode(w));
  Encoded v2(get_scheme(SchemeKind::GptqV2).encode(w));
  EXPECT_EQ(uint32_t(v1.views["qzeros"].i32(0)), 0x22222222u);
  EXPECT_EQ(uint32_t(v2.views["qzeros"].i32(0)), 0x33333333u);
  // Sequential nibble order along K: q[n][k] for k = 0..7 in qweight[0][n], lowest nibble first.
  uint32_t word = uint32_t(v2.views["qweight"].i32(0));
  for (int i = 0; i < 8; ++i) EXPECT_EQ((word >> (4 * i)) & 0xF, w.q[size_t(i)]);
}

TEST(Gptq, EncodeRefusesWhatTheFormatCannotHold) {
  std::mt19937_64 rng(3);
  auto w = test::random_weight(rng, {.bits = 4, .group_size = 32, .K = 100, .N = 16});
  expect_mentions(error_of([&] { get_scheme(SchemeKind::GptqV2).encode(w); }),
                  {"K must be a multiple of 8"});
  w = test::random_weight(rng, {.bits = 4, .group_size = 32, .K = 64, .N = 20});
  expect_mentions(error_of([&] { get_scheme(SchemeKind::GptqV2).encode(w); }),
                  {"N must be a multiple of 8"});
  w = test::random_weight(
      rng, {.bits = 4, .group_size = 32, .K = 64, .N = 16, .zero_min = 0, .zero_max = 15});
  w.zeros[3] = 0;
  expect_mentions(error_of([&] { get_scheme(SchemeKind::GptqV1).encode(w); }),
                  {"zero point 0", "gptq_v2"});
  w.zeros[3] = 16;
  expect_mentions(error_of([&] { get_scheme(SchemeKind::GptqV2).encode(w); }),
                  {"zero point 16", "cannot be stored"});
}

TEST(Gptq, IdentityGIdxIsDroppedAndBadGIdxRefused) {
  std::mt19937_64 rng(4);
  auto w = test::random_weight(rng, {.bits = 4, .group_size = 32, .K = 64, .N = 16, .zero_min = 1});
  Encoded enc(get_scheme(SchemeKind::GptqV1).encode(w));
  ASSERT_NE(enc.layer.g_idx, nullptr);  // GPTQ writers always write g_idx
  EXPECT_TRUE(get_scheme(SchemeKind::GptqV1).decode(enc.layer, {4, 32, false}).g_idx.empty());
  enc.tensors.at("g_idx").set_i32(7, 2);  // only groups 0 and 1 exist
  Encoded bad(enc.tensors);
  expect_mentions(error_of([&] {
                    get_scheme(SchemeKind::GptqV1).decode(bad.layer, {4, 32, false});
                  }),
                  {"layer.g_idx", "g_idx[7] = 2", "outside [0, 2)"});
}

TEST(Gptq, ShapesAreCheckedAgainstTheConfig) {
  std::mt19937_64 rng(5);
  auto w =
      test::random_weight(rng, {.bits = 4, .group_size = 32, .K = 128, .N = 16, .zero_min = 1});
  Encoded enc(get_scheme(SchemeKind::GptqV1).encode(w));
  auto empty = enc.tensors;
  empty.at("qweight") = OwnedTensor::zeros(DType::I32, {int64_t(1) << 40, 0});
  Encoded empty_layer(empty);
  expect_mentions(error_of([&] {
                    get_scheme(SchemeKind::GptqV1).decode(empty_layer.layer, {4, 32, false});
                  }),
                  {"layer.qweight", "empty layer"});
  // group_size 64 in the config: scales [4, 16] contradict the 2 groups expected.
  expect_mentions(error_of([&] {
                    get_scheme(SchemeKind::GptqV1).decode(enc.layer, {4, 64, false});
                  }),
                  {"layer.scales", "[4, 16]", "expected [2, 16]", "group_size = 64"});
  // bits 8 in the config: qweight [16, 16] packs K = 64, but g_idx (128) and scales (4 groups of
  // 32) both say K = 128: qweight is the odd one out.
  expect_mentions(error_of([&] {
                    get_scheme(SchemeKind::GptqV1).decode(enc.layer, {8, 32, false});
                  }),
                  {"layer.qweight", "[16, 16]", "K = 64", "bits=8", "g_idx [128]", "scales [4, 16]",
                   "both say K = 128"});
  expect_mentions(error_of([&] {
                    get_scheme(SchemeKind::GptqV1).decode(enc.layer, {3, 32, false});
                  }),
                  {"bits=3", "supports 4 and 8"});
  Encoded no_zeros(enc.tensors);
  no_zeros.layer.qzeros = nullptr;
  expect_mentions(error_of([&] {
                    get_scheme(SchemeKind::GptqV1).decode(no_zeros.layer, {4, 32, false});
                  }),
                  {"layer.qzeros is missing", "qweight/scales/g_idx"});
  auto wrong = enc.tensors;
  wrong.at("qweight").dtype = DType::F32;
  Encoded wrong_dtype(wrong);
  expect_mentions(error_of([&] {
                    get_scheme(SchemeKind::GptqV1).decode(wrong_dtype.layer, {4, 32, false});
                  }),
                  {"layer.qweight", "dtype F32", "expected I32"});
}

TEST(Gptq, EightBitV1StoredFFCannotBeDecoded) {
  std::mt19937_64 rng(6);
  auto w = test::random_weight(
      rng, {.bits = 8, .group_size = -1, .K = 16, .N = 8, .zero_min = 0, .zero_max = 255});
  w.zeros[2] = 255;
  Encoded enc(get_scheme(SchemeKind::GptqV2).encode(w));  // stored 0xFF, read as v1 -> 256
  expect_mentions(error_of([&] {
                    get_scheme(SchemeKind::GptqV1).decode(enc.layer, {8, -1, false});
                  }),
                  {"layer.qzeros", "0xff", "256"});
}

TEST(Gptq, MislabelledV2IsDetectedAndAMixIsRefused) {
  std::mt19937_64 rng(7);
  auto w = test::random_weight(rng, {.bits = 4, .group_size = 32, .K = 64, .N = 16, .sym = true});
  Encoded v2(get_scheme(SchemeKind::GptqV2).encode(w));  // stored zeros 8
  std::vector<std::string> warnings;
  EXPECT_EQ(resolve_gptq_scheme(v2.layer, {4, 32, true}, SchemeKind::GptqV1, warnings),
            SchemeKind::GptqV2);
  ASSERT_EQ(warnings.size(), 1u);
  expect_mentions(warnings[0], {"layer.qzeros", "gptq_v2", "#v1-or-v2"});
  Encoded v1(get_scheme(SchemeKind::GptqV1).encode(w));  // stored zeros 7
  warnings.clear();
  EXPECT_EQ(resolve_gptq_scheme(v1.layer, {4, 32, true}, SchemeKind::GptqV1, warnings),
            SchemeKind::GptqV1);
  EXPECT_TRUE(warnings.empty());
  expect_mentions(error_of([&] {
                    resolve_gptq_scheme(v1.layer, {4, 32, true}, SchemeKind::GptqV2, warnings);
                  }),
                  {"gptq_v2", "v1 convention"});
  auto mixed = v1.tensors;
  mixed.at("qzeros").set_i32(0, int32_t(0x77777778u));  // one v2-style nibble among v1 ones
  Encoded mix(mixed);
  expect_mentions(error_of([&] {
                    resolve_gptq_scheme(mix.layer, {4, 32, true}, SchemeKind::GptqV1, warnings);
                  }),
                  {"layer.qzeros", "mix"});
  // Asymmetric layers keep their label whatever the zeros are.
  warnings.clear();
  EXPECT_EQ(resolve_gptq_scheme(v2.layer, {4, 32, false}, SchemeKind::GptqV1, warnings),
            SchemeKind::GptqV1);
}

// The AutoGPTQ-packed fixture: decode, compare w_dequant and zeros exactly, reproduce y.
TEST(Gptq, UpstreamFixtureReproducesExpectedOutputs) {
  auto dir = test::fixtures_dir() / "gptq_v1_sym_g128";
  Checkpoint ckpt = Checkpoint::open(dir);
  CanonicalWeight w = ckpt.decode_linear("model.layers.0.self_attn.q_proj");
  ASSERT_EQ(w.K, 512);
  ASSERT_EQ(w.N, 384);
  EXPECT_TRUE(w.g_idx.empty());  // desc_act false: identity grouping dropped
  EXPECT_TRUE(w.symmetric());
  auto io = SafetensorsFile::open(dir / "io.safetensors");
  EXPECT_EQ(test::dequant_mismatches(w, io->tensor("w_dequant")), 0);
  const TensorView& zeros = io->tensor("zeros");
  for (int64_t i = 0; i < w.num_groups * w.N; ++i)
    ASSERT_EQ(int(w.zeros[size_t(i)]), zeros.i32(size_t(i)));
  for (const char* tag : {"", "bf16_"}) {
    for (int M : {1, 7, 33}) {
      auto x = test::as_doubles(io->tensor(fmt::format("x_{}m{}", tag, M)));
      auto ref = test::as_doubles(io->tensor(fmt::format("y_{}m{}", tag, M)));
      auto y = test::matmul(w, x, M);
      // The expected y was computed in float64 and stored as F32: compare after the same rounding.
      EXPECT_LE(test::rel_error(test::to_f32(y), ref), 1e-12) << tag << M;
      EXPECT_LE(test::rel_error(y, ref), 1e-7) << tag << M;
    }
  }
}

}  // namespace
}  // namespace nibble

// Found by fuzz_schemes (tests/fuzz/regressions/schemes_group_size_zero): a group size of 0
// reached the group count's division.
TEST(Gptq, AGroupSizeOfZeroIsRefusedNotDividedBy) {
  nibble::OwnedTensor qweight = nibble::OwnedTensor::zeros(nibble::DType::I32, {2, 8});
  nibble::OwnedTensor qzeros = nibble::OwnedTensor::zeros(nibble::DType::I32, {1, 1});
  nibble::OwnedTensor scales = nibble::OwnedTensor::zeros(nibble::DType::F16, {1, 8});
  nibble::TensorView vq = qweight.view("l.qweight"), vz = qzeros.view("l.qzeros"),
                     vs = scales.view("l.scales");
  nibble::LayerTensors t;
  t.prefix = "l";
  t.qweight = &vq;
  t.qzeros = &vz;
  t.scales = &vs;
  nibble::SchemeParams p;
  p.group_size = 0;
  for (auto kind :
       {nibble::SchemeKind::GptqV1, nibble::SchemeKind::GptqV2, nibble::SchemeKind::AwqGemm}) {
    try {
      nibble::get_scheme(kind).decode(t, p);
      ADD_FAILURE() << "group size 0 accepted";
    } catch (const nibble::Error& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr("group_size 0"));
    }
  }
}
