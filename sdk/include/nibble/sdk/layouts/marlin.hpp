// The Marlin layout, host side (docs/backends-reference.md#marlin; vLLM's gptq_marlin_repack /
// marlin_permute_scales / marlin_zero_points), for every plugin whose kernels read it:
//  * weights [K][N] (rows in act-order sorted order when g_idx is given) cut into 16×16 tiles,
//    tiles laid out row of tiles by row of tiles ([K/16][N/16][16][16]), each run of 1024 values
//    (four tiles, 64 outputs) permuted by weight_perm(bits) so that one GPU thread's mma fragment
//    is contiguous, then packed 32/bits values per uint32: [K/16][N*bits/2];
//  * scales [G][N] permuted in runs of 64 by scale_perm() when grouped, in runs of 32 by
//    scale_perm_single() for one group (per channel);
//  * zero points (AWQ-style uint4/uint8 with zp, for asymmetric weights) permuted by scale_perm(),
//    interleaved within each word as the dequantizer expects, packed along N: [G][N*bits/32].
//    Symmetric weights have none (uint4b8 / uint8b128: the zero 2^(bits-1) is implied).
// Marlin's rules: N % 64 == 0, K % 128 == 0, group in {-1, 32, 64, 128} with K % group == 0, and
// no act-order with zero points. Header-only; the permutations are built exactly as vLLM's
// marlin_utils builds them, from the mma fragment each thread owns.
#pragma once

#include <nibble/sdk/plugin.hpp>
#include <nibble/sdk/weights.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace nibble::sdk::marlin {

/// Marlin's tile edge and the output width one permutation run covers.
constexpr int64_t kTile = 16;
constexpr int64_t kRunOutputs = 64;
constexpr int64_t kRun = 1024;  // values per permutation run: 16 rows × 64 outputs

/// The within-word interleave of packed values and zero points ([0,2,4,6,1,3,5,7] for 4-bit,
/// [0,2,1,3] for 8-bit); throws UNSUPPORTED for other widths.
inline std::vector<int> interleave(int bits) {
  if (bits == 4) return {0, 2, 4, 6, 1, 3, 5, 7};
  if (bits == 8) return {0, 2, 1, 3};
  throw PluginError(NIBBLE_UNSUPPORTED,
                    "Marlin packs 4- or 8-bit values, not " + std::to_string(bits) + "-bit");
}

/// vLLM's get_weight_perm(bits): packed position c of a run holds tiled position perm[c].
inline std::array<int, kRun> weight_perm(int bits) {
  std::vector<int> perm;
  perm.reserve(kRun);
  for (int i = 0; i < 32; ++i) {
    std::vector<int> fragment;
    const int col = i / 4;
    for (int block : {0, 1})
      for (int row : {2 * (i % 4), 2 * (i % 4) + 1, 2 * (i % 4 + 4), 2 * (i % 4 + 4) + 1})
        fragment.push_back(16 * row + col + 8 * block);
    for (int j = 0; j < 4; ++j)
      for (int p : fragment) perm.push_back(p + 256 * j);
  }
  const std::vector<int> order = interleave(bits);
  const size_t L = order.size();
  std::array<int, kRun> out{};
  for (size_t c = 0; c < size_t(kRun); ++c) out[c] = perm[(c / L) * L + size_t(order[c % L])];
  return out;
}

/// vLLM's scale_perm: grouped scales (and zero points), runs of 64.
inline std::array<int, 64> scale_perm() {
  std::array<int, 64> p{};
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 8; ++j) p[size_t(8 * i + j)] = i + 8 * j;
  return p;
}

/// vLLM's scale_perm_single: per-channel scales, runs of 32.
inline std::array<int, 32> scale_perm_single() {
  std::array<int, 32> p{};
  const int offsets[8] = {0, 1, 8, 9, 16, 17, 24, 25};
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 8; ++j) p[size_t(8 * i + j)] = 2 * i + offsets[j];
  return p;
}

/// gptq_marlin_repack of q [K][N] (row-major, one unsigned value per byte, rows already in the
/// kernel's order) into [K/16][N*bits/2] words. Needs K % 16 == 0 and N % 64 == 0.
inline std::vector<uint32_t> repack(const std::vector<uint8_t>& q_kn, int64_t K, int64_t N,
                                    int bits) {
  require(K % kTile == 0 && N % kRunOutputs == 0, "marlin repack: K % 16 and N % 64 must be 0");
  const std::array<int, kRun> perm = weight_perm(bits);
  const int64_t pack = 32 / bits, row_values = N * kTile;
  std::vector<uint32_t> out(size_t(K / kTile * row_values / pack), 0);
  for (int64_t kt = 0; kt < K / kTile; ++kt)
    for (int64_t c = 0; c < row_values; ++c) {
      // Tiled position (within this row of tiles) the packed position c takes its value from.
      const int64_t t = (c / kRun) * kRun + perm[size_t(c % kRun)];
      const int64_t n_tile = t / 256, k_in = (t % 256) / 16, n_in = t % 16;
      const uint32_t q = q_kn[size_t((kt * kTile + k_in) * N + n_tile * 16 + n_in)];
      out[size_t((kt * row_values + c) / pack)] |= q << (bits * (c % pack));
    }
  return out;
}

/// Why Marlin cannot take a K × N weight with this group size, act-order, symmetry and largest
/// zero point (0: unknown) ("" if it can). `what` names the weight in the message.
inline std::string why_not(int64_t K, int64_t N, int group_size, bool act_order, bool symmetric,
                           int bits, int max_zero, const std::string& what) {
  if (N % 64 != 0)
    return what + ": N = " + std::to_string(N) +
           " is not a multiple of 64 (Marlin's minimum thread tile of outputs)";
  if (K % 128 != 0)
    return what + ": K = " + std::to_string(K) +
           " is not a multiple of 128 (Marlin's minimum thread tile along K)";
  if (group_size != -1 && group_size != 32 && group_size != 64 && group_size != 128)
    return what + ": group size " + std::to_string(group_size) +
           " (Marlin supports -1, 32, 64 and 128)";
  if (group_size != -1 && K % group_size != 0)
    return what + ": K = " + std::to_string(K) + " is not a multiple of the group size " +
           std::to_string(group_size);
  if (act_order && !symmetric && group_size != -1)
    return what +
           ": act-order with zero points (Marlin's zero-point uint4/uint8 kernels, the "
           "AWQ form, have no act-order variant)";
  if (bits == 4 && max_zero > 15)
    return what + ": zero point " + std::to_string(max_zero) +
           " (GPTQ v1's stored 0xF) does not fit Marlin's uint4 zero points (0..15)";
  return "";
}

/// One canonical weight in the Marlin layout.
struct Packed {
  int bits = 4;
  int64_t K = 0, N = 0, num_groups = 1;
  int group_size = -1;
  /// One group per output channel (scales permuted by scale_perm_single).
  bool single_group = true;
  /// Every zero point is 2^(bits-1): no zero points are stored.
  bool symmetric = true;
  std::vector<uint32_t> qweight;  ///< [K/16][N*bits/2]
  std::vector<float> scales;      ///< [G][N] permuted, exact copies of the checkpoint's scales
  DLDataType scales_dtype{};      ///< the checkpoint's scale dtype (f16, bf16 or f32)
  /// [G][N*bits/32] permuted, interleaved; empty if symmetric (unless asked to keep them)
  std::vector<uint32_t> zeros;
  /// Act-order: layout row k holds input channel columns[k], of group groups[k]; both empty
  /// without act-order (row k is channel k, of group k / group_size).
  std::vector<int32_t> columns, groups;
  /// Where output n's scale sits in a row of `scales` (the inverse of the scale permutation).
  std::vector<int64_t> scale_position;
  /// Where output n's zero point sits in a row of `zeros`: word and bit shift (empty when
  /// `zeros` is).
  std::vector<int64_t> zero_word;
  std::vector<int8_t> zero_shift;

  /// Bytes of the packed words, scales (as `scale_bytes` each), zero points and act-order tables.
  size_t bytes(size_t scale_bytes) const {
    return (qweight.size() + zeros.size()) * sizeof(uint32_t) + scales.size() * scale_bytes +
           (columns.size() + groups.size()) * sizeof(int32_t);
  }
};

/// Repack a canonical weight; throws UNSUPPORTED for what Marlin cannot represent (a zero point of
/// 2^bits, zero points with act-order, shapes outside its rules) and INVALID_ARGUMENT for a q value
/// wider than the weight's bits. `keep_zero_points` stores zero points even when they are all
/// 2^(bits-1) (for a stack of experts of which some are asymmetric).
inline Packed pack(const QuantWeight& w, bool keep_zero_points = false) {
  Packed m;
  m.bits = w.bits();
  m.K = w.K();
  m.N = w.N();
  m.num_groups = w.num_groups();
  m.group_size = w.group_size();
  m.scales_dtype = w.raw().scales_dtype;
  const int pack_count = 32 / w.bits();
  const int64_t K = m.K, N = m.N, G = m.num_groups;
  const int mid = 1 << (w.bits() - 1);
  const bool act_order = w.has_g_idx() && w.group_size() != -1;
  int max_zero = 0;
  for (int64_t g = 0; g < G; ++g)
    for (int64_t n = 0; n < N; ++n) {
      m.symmetric = m.symmetric && w.zero(g, n) == mid;
      max_zero = std::max(max_zero, int(w.zero(g, n)));
    }
  const std::string why =
      why_not(K, N, w.group_size(), act_order, m.symmetric, w.bits(), max_zero, "weight");
  if (!why.empty()) throw PluginError(NIBBLE_UNSUPPORTED, why);
  // One group row takes Marlin's single-group scale order. Decided by the rows, not by
  // group_size >= K: a row-parallel act-order shard keeps every group of the full layer although
  // its own K may span one group or less.
  m.single_group = G == 1;

  std::vector<int32_t> order(static_cast<size_t>(K));
  for (int64_t k = 0; k < K; ++k) order[size_t(k)] = int32_t(k);
  if (act_order) {
    order = channels_sorted_by_group(w);
    m.columns = order;
    for (int64_t k = 0; k < K; ++k) m.groups.push_back(int32_t(w.group(order[size_t(k)])));
  }
  const int max_q = (1 << w.bits()) - 1;
  std::vector<uint8_t> q_kn(size_t(K * N));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) {
      const uint8_t q = w.q(n, order[size_t(k)]);
      if (q > max_q)
        throw PluginError(
            NIBBLE_INVALID_ARGUMENT,
            "q value " + std::to_string(q) + " does not fit " + std::to_string(w.bits()) + " bits");
      q_kn[size_t(k * N + n)] = q;
    }
  m.qweight = repack(q_kn, K, N, m.bits);

  const std::array<int, 64> sp = scale_perm();
  const std::array<int, 32> sps = scale_perm_single();
  std::array<int, 64> inverse64{};
  std::array<int, 32> inverse32{};
  for (int p = 0; p < 64; ++p) inverse64[size_t(sp[size_t(p)])] = p;
  for (int p = 0; p < 32; ++p) inverse32[size_t(sps[size_t(p)])] = p;
  m.scale_position.resize(size_t(N));
  for (int64_t n = 0; n < N; ++n)
    m.scale_position[size_t(n)] = m.single_group ? (n / 32) * 32 + inverse32[size_t(n % 32)]
                                                 : (n / 64) * 64 + inverse64[size_t(n % 64)];
  m.scales.resize(size_t(G * N));
  for (int64_t g = 0; g < G; ++g)
    for (int64_t n = 0; n < N; ++n)
      m.scales[size_t(g * N + m.scale_position[size_t(n)])] = w.scale(g, n);

  // Zero points: scale_perm (never the single one), interleave, pack along N.
  if (!m.symmetric || keep_zero_points) {
    const std::vector<int> order_in_word = interleave(m.bits);
    const int64_t L = int64_t(order_in_word.size()), words = N / pack_count;
    std::vector<int> inverse_interleave(static_cast<size_t>(L));
    for (int64_t t = 0; t < L; ++t) inverse_interleave[size_t(order_in_word[size_t(t)])] = int(t);
    m.zero_word.resize(size_t(N));
    m.zero_shift.resize(size_t(N));
    for (int64_t n = 0; n < N; ++n) {
      const int64_t p = (n / 64) * 64 + inverse64[size_t(n % 64)];
      const int64_t t = (p / L) * L + inverse_interleave[size_t(p % L)];
      m.zero_word[size_t(n)] = t / pack_count;
      m.zero_shift[size_t(n)] = int8_t(m.bits * (t % pack_count));
    }
    m.zeros.assign(size_t(G * words), 0);
    for (int64_t g = 0; g < G; ++g)
      for (int64_t n = 0; n < N; ++n) {
        const int z = w.zero(g, n);
        if (z > max_q)
          throw PluginError(NIBBLE_UNSUPPORTED,
                            "weight: zero point " + std::to_string(z) + " at group " +
                                std::to_string(g) + ", output " + std::to_string(n) +
                                " (a GPTQ v1 stored 0xF) does not fit Marlin's uint" +
                                std::to_string(m.bits) + " zero points (0.." +
                                std::to_string(max_q) + ")");
        m.zeros[size_t(g * words + m.zero_word[size_t(n)])] |= uint32_t(z)
                                                               << m.zero_shift[size_t(n)];
      }
  }
  return m;
}

}  // namespace nibble::sdk::marlin
