// The repacked layouts themselves, checked against the documented permutations
// (docs/backends-reference.md#exllama, #marlin, #npu_ref-the-ascend-antiquant-layout) on small
// hand-made cases: Marlin's tile permutation and scale permutations, ExLlama's nibble shuffle and
// q_perm, Ascend's centred int4 and antiquant offset sign.
#include <gtest/gtest.h>

#include <array>
#include <set>
#include <vector>

#include "ascend_layout.hpp"
#include "exllama_layout.hpp"
#include "marlin_layout.hpp"
#include "reference.hpp"

namespace nibble::test {
namespace {

using sdk::marlin::repack;
using sdk::marlin::weight_perm;

// vLLM's get_weight_perm, transcribed loop for loop from its Python (numpy reshape and
// fancy-indexing spelled out), independently of the plugin's version.
std::vector<int> python_weight_perm(int bits) {
  std::vector<int> perm_list;
  for (int i = 0; i < 32; ++i) {
    std::vector<int> perm1;
    int col = i / 4;
    for (int block = 0; block < 2; ++block) {
      int rows[4] = {2 * (i % 4), 2 * (i % 4) + 1, 2 * (i % 4 + 4), 2 * (i % 4 + 4) + 1};
      for (int row : rows) perm1.push_back(16 * row + col + 8 * block);
    }
    for (int j = 0; j < 4; ++j)
      for (int p : perm1) perm_list.push_back(p + 256 * j);
  }
  std::vector<int> interleave =
      bits == 4 ? std::vector<int>{0, 2, 4, 6, 1, 3, 5, 7} : std::vector<int>{0, 2, 1, 3};
  std::vector<int> out;
  for (size_t r = 0; r < perm_list.size() / interleave.size(); ++r)
    for (int i : interleave) out.push_back(perm_list[r * interleave.size() + size_t(i)]);
  return out;
}

TEST(ReferenceMarlinLayout, WeightPermMatchesVllmTranscription) {
  for (int bits : {4, 8}) {
    const auto perm = weight_perm(bits);
    const std::vector<int> expected = python_weight_perm(bits);
    ASSERT_EQ(expected.size(), perm.size());
    EXPECT_TRUE(std::equal(perm.begin(), perm.end(), expected.begin())) << bits << "-bit";
    EXPECT_EQ(std::set<int>(perm.begin(), perm.end()).size(), 1024u) << "not a permutation";
  }
}

// The first packed word of a 4-bit tile row holds thread 0's mma fragment: rows {0, 8, 1, 9} ...
// of outputs {0, 8}, in the interleaved order [0,2,4,6,1,3,5,7] of
// (k0,n0) (k1,n0) (k8,n0) (k9,n0) (k0,n8) (k1,n8) (k8,n8) (k9,n8).
TEST(ReferenceMarlinLayout, FirstWordHoldsThreadZeroFragment) {
  const int64_t K = 16, N = 64;
  std::vector<uint8_t> q(size_t(K * N));
  for (int64_t k = 0; k < K; ++k)
    for (int64_t n = 0; n < N; ++n) q[size_t(k * N + n)] = uint8_t((k * 5 + n * 3) % 16);
  const std::vector<uint32_t> packed = repack(q, K, N, 4);
  ASSERT_EQ(packed.size(), size_t(K / 16 * N * 4 / 2));
  const std::array<std::pair<int, int>, 8> kn = {
      {{0, 0}, {8, 0}, {0, 8}, {8, 8}, {1, 0}, {9, 0}, {1, 8}, {9, 8}}};
  for (int i = 0; i < 8; ++i) {
    const uint32_t got = (packed[0] >> (4 * i)) & 0xF;
    EXPECT_EQ(got, q[size_t(kn[size_t(i)].first * N + kn[size_t(i)].second)]) << "nibble " << i;
  }
  // 8-bit: four values per word, interleave [0,2,1,3] of (k0,n0) (k1,n0) (k8,n0) (k9,n0).
  const std::vector<uint32_t> packed8 = repack(q, K, N, 8);
  ASSERT_EQ(packed8.size(), size_t(K / 16 * N * 8 / 2));
  const int rows8[4] = {0, 8, 1, 9};
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ((packed8[0] >> (8 * i)) & 0xFF, q[size_t(rows8[i] * N)]) << "byte " << i;
}

// Decoding every packed value back through the documented permutation restores q exactly.
TEST(ReferenceMarlinLayout, WholeTileRowDecodesBack) {
  const int64_t K = 32, N = 128;
  for (int bits : {4, 8}) {
    std::vector<uint8_t> q(size_t(K * N));
    for (size_t i = 0; i < q.size(); ++i) q[i] = uint8_t((i * 7 + i / 13) % (1u << bits));
    const std::vector<uint32_t> packed = repack(q, K, N, bits);
    const std::vector<int> perm = python_weight_perm(bits);
    const int64_t pack = 32 / bits, row_values = N * 16;
    for (int64_t kt = 0; kt < K / 16; ++kt)
      for (int64_t c = 0; c < row_values; ++c) {
        const uint32_t v = (packed[size_t((kt * row_values + c) / pack)] >> (bits * (c % pack))) &
                           ((1u << bits) - 1);
        // Tiled layout: [K/16][N/16][16][16] flattened per tile row, then permuted per 1024.
        const int64_t t = (c / 1024) * 1024 + perm[size_t(c % 1024)];
        const int64_t k = kt * 16 + (t % 256) / 16, n = (t / 256) * 16 + t % 16;
        ASSERT_EQ(v, q[size_t(k * N + n)]) << bits << "-bit, packed position " << c;
      }
  }
}

TEST(ReferenceMarlinLayout, ScalePermutationsAreVllms) {
  const auto sp = sdk::marlin::scale_perm();
  const auto single = sdk::marlin::scale_perm_single();
  const std::array<int, 8> first_row = {0, 8, 16, 24, 32, 40, 48, 56};
  for (int j = 0; j < 8; ++j) EXPECT_EQ(sp[size_t(j)], first_row[size_t(j)]);
  EXPECT_EQ(sp[8], 1);
  EXPECT_EQ(sp[63], 63);
  const std::array<int, 16> single_head = {0, 1, 8,  9,  16, 17, 24, 25,
                                           2, 3, 10, 11, 18, 19, 26, 27};
  for (int j = 0; j < 16; ++j) EXPECT_EQ(single[size_t(j)], single_head[size_t(j)]);
}

// A packed MarlinWeight stores grouped scales at s_perm[g][8i + j] = s[g][i + 8j] and per-channel
// scales through scale_perm_single, and its words are sdk::marlin::repack of the q matrix.
TEST(ReferenceMarlinLayout, PackedWeightUsesPermutedScalesAndRepackedWords) {
  for (int gs : {64, -1}) {
    const CanonicalWeight w =
        random_weight(QuantSpec{128, 64, 4, gs, true, false, false, false, sdk::dtype_f32(), 3});
    const nibble_canonical_weight cw = w.view();
    const auto m = gpu_ref::MarlinWeight::pack(sdk::QuantWeight(cw, "w"));
    std::vector<uint8_t> q_kn(size_t(w.K * w.N));
    for (int64_t k = 0; k < w.K; ++k)
      for (int64_t n = 0; n < w.N; ++n) q_kn[size_t(k * w.N + n)] = w.q[size_t(n * w.K + k)];
    EXPECT_EQ(m.qweight(), repack(q_kn, w.K, w.N, 4));
    EXPECT_FALSE(m.has_zero_points());
    const auto sp = sdk::marlin::scale_perm();
    const auto single = sdk::marlin::scale_perm_single();
    for (int64_t g = 0; g < w.num_groups; ++g)
      for (int64_t p = 0; p < w.N; ++p) {
        const int64_t n =
            gs == -1 ? (p / 32) * 32 + single[size_t(p % 32)] : (p / 64) * 64 + sp[size_t(p % 64)];
        EXPECT_EQ(m.scales()[size_t(g * w.N + p)], float(w.scale(g, n)));
      }
  }
}

// AWQ-style zero points: scale_perm, then the [0,2,4,6,1,3,5,7] interleave, packed along N.
TEST(ReferenceMarlinLayout, ZeroPointsArePermutedInterleavedAndPacked) {
  CanonicalWeight w =
      random_weight(QuantSpec{128, 64, 4, 128, false, false, false, false, sdk::dtype_f16(), 4});
  for (int64_t n = 0; n < w.N; ++n) w.zeros[size_t(n)] = uint8_t(n % 16);
  const nibble_canonical_weight cw = w.view();
  const auto m = gpu_ref::MarlinWeight::pack(sdk::QuantWeight(cw, "w"));
  ASSERT_TRUE(m.has_zero_points());
  const auto sp = sdk::marlin::scale_perm();
  const int interleave[8] = {0, 2, 4, 6, 1, 3, 5, 7};
  ASSERT_EQ(m.zero_points().size(), size_t(w.N / 8));
  for (int64_t t = 0; t < w.N; ++t) {
    const int64_t p = (t / 8) * 8 + interleave[t % 8];  // position before the interleave
    const int64_t n = (p / 64) * 64 + sp[size_t(p % 64)];
    EXPECT_EQ((m.zero_points()[size_t(t / 8)] >> (4 * (t % 8))) & 0xF, w.zeros[size_t(n)]) << t;
  }
}

// exllamav2 shuffle_4bit_8: rows 0..7 of a word with values 1..8 become nibbles 1,3,5,7,2,4,6,8.
TEST(ReferenceExllamaLayout, FourBitWordsAreShuffled) {
  CanonicalWeight w =
      random_weight(QuantSpec{8, 1, 4, -1, true, false, false, false, sdk::dtype_f16(), 5});
  for (int k = 0; k < 8; ++k) w.q[size_t(k)] = uint8_t(k + 1);
  const nibble_canonical_weight cw = w.view();
  const auto e = gpu_ref::ExllamaWeight::pack(sdk::QuantWeight(cw, "w"));
  ASSERT_EQ(e.qweight().size(), 1u);
  EXPECT_EQ(e.qweight()[0], 0x86427531u);
  EXPECT_EQ(e.width(), 8);
}

// Act-order rows are made sequential by group (q_perm = stable argsort of g_idx); v1 zero points
// (1..16) are stored minus one, v2-style ones (0..15) as they are.
TEST(ReferenceExllamaLayout, QPermSortsByGroupAndZeroOffsetFollowsTheZeros) {
  CanonicalWeight w =
      random_weight(QuantSpec{16, 8, 4, 8, false, true, false, false, sdk::dtype_f16(), 6});
  for (int k = 0; k < 16; ++k) w.g_idx[size_t(k)] = k % 2;  // groups interleaved
  for (size_t i = 0; i < w.zeros.size(); ++i) w.zeros[i] = uint8_t(1 + i % 16);  // 1..16
  nibble_canonical_weight cw = w.view();
  auto e = gpu_ref::ExllamaWeight::pack(sdk::QuantWeight(cw, "w"));
  const std::vector<int32_t> expected = {0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15};
  EXPECT_EQ(e.input_columns(), expected);
  EXPECT_EQ(e.zero_offset(), 1);
  EXPECT_EQ(e.qzeros()[0] & 0xF, uint32_t(w.zeros[0] - 1));
  for (auto& z : w.zeros) z = uint8_t(z - 1);  // 0..15
  cw = w.view();
  e = gpu_ref::ExllamaWeight::pack(sdk::QuantWeight(cw, "w"));
  EXPECT_EQ(e.zero_offset(), 0);
  EXPECT_EQ(e.qzeros()[0] & 0xF, uint32_t(w.zeros[0]));
}

// Ascend: centred int4 two per byte, offset = 2^(bits-1) - z (the sign that reproduces
// (q - z) · s, not upstream GPTQ's z - 8), including z = 16 where w + offset reaches -16.
TEST(ReferenceAscendLayout, CentredWeightsAndOffsetSign) {
  CanonicalWeight w =
      random_weight(QuantSpec{64, 9, 4, 32, false, false, false, false, sdk::dtype_f16(), 7});
  w.zeros[0] = 16;
  w.zeros[1] = 3;
  w.q[0] = 0;  // n = 0, k = 0: (0 - 16) · s
  const nibble_canonical_weight cw = w.view();
  const sdk::QuantWeight qw(cw, "w");
  const auto a = npu_ref::AscendWeight::pack(qw);
  for (int64_t k = 0; k < w.K; ++k)
    for (int64_t n = 0; n < w.N; ++n)
      ASSERT_EQ(a.centred(k, n), int(w.q[size_t(n * w.K + k)]) - 8) << k << "," << n;
  EXPECT_EQ(a.offset(0, 0), -8.f);
  EXPECT_EQ(a.offset(0, 1), 5.f);
  EXPECT_EQ(a.bytes() >= size_t(w.K * 5), true);  // 9 outputs -> 5 bytes per row
  float tile[32 * 9];
  a.decode(0, 0, 9, tile);
  EXPECT_EQ(tile[0], float(w.dequant(0, 0)));
  EXPECT_EQ(tile[0], -16.f * float(w.scale(0, 0)));
  for (int64_t k = 0; k < 32; ++k)
    for (int64_t n = 0; n < 9; ++n) ASSERT_EQ(tile[k * 9 + n], float(w.dequant(n, k)));
}

}  // namespace
}  // namespace nibble::test
