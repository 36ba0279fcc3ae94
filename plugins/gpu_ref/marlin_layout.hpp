// The Marlin layout (docs/backends-reference.md#marlin; vLLM's gptq_marlin_repack /
// marlin_permute_scales / marlin_zero_points):
//  * weights [K][N] (rows in act-order sorted order when g_idx is given) cut into 16×16 tiles,
//    tiles laid out row of tiles by row of tiles ([K/16][N/16][16][16]), each run of 1024 values
//    (four tiles, 64 outputs) permuted by weight_perm(bits) so that one GPU thread's mma fragment
//    is contiguous, then packed 32/bits values per uint32: [K/16][N*bits/2];
//  * scales [G][N] permuted in runs of 64 by scale_perm() when grouped, in runs of 32 by
//    scale_perm_single() for one group (per channel);
//  * zero points (AWQ-style uint4/uint8 with zp, for asymmetric weights) permuted by scale_perm(),
//    interleaved within each word as the dequantizer expects, packed along N: [G][N*bits/32].
//    Symmetric weights have none (uint4b8 / uint8b128: the zero 2^(bits-1) is implied).
// Marlin's rules, checked by the kernels: N % 64 == 0, K % 128 == 0, group in {-1, 32, 64, 128}
// with K % group == 0, and no act-order with zero points.
#pragma once

#include <nibble/sdk/portable_gemm.hpp>
#include <nibble/sdk/weights.hpp>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace nibble::gpu_ref {

/// Marlin's tile edge and the output width one permutation run covers.
constexpr int64_t kMarlinTile = 16;
constexpr int64_t kMarlinRunOutputs = 64;
constexpr int64_t kMarlinRun = 1024;  // values per permutation run: 16 rows × 64 outputs

/// vLLM's get_weight_perm(bits): packed position c of a run holds tiled position perm[c].
std::array<int, kMarlinRun> marlin_weight_perm(int bits);
/// vLLM's scale_perm: grouped scales (and zero points), runs of 64.
std::array<int, 64> marlin_scale_perm();
/// vLLM's scale_perm_single: per-channel scales, runs of 32.
std::array<int, 32> marlin_scale_perm_single();
/// The within-word interleave of zero points ([0,2,4,6,1,3,5,7] for 4-bit, [0,2,1,3] for 8-bit).
std::vector<int> marlin_interleave(int bits);

/// gptq_marlin_repack of q [K][N] (row-major, one unsigned value per byte, rows already in the
/// kernel's order) into [K/16][N*bits/2] words. Needs K % 16 == 0 and N % 64 == 0.
std::vector<uint32_t> marlin_repack(const std::vector<uint8_t>& q_kn, int64_t K, int64_t N,
                                    int bits);

/// Why Marlin cannot take a K × N weight with this group size, act-order, symmetry and largest
/// zero point (0: unknown) ("" if it can). `what` names the weight in the message.
std::string marlin_why_not(int64_t K, int64_t N, int group_size, bool act_order, bool symmetric,
                           int bits, int max_zero, const std::string& what);

/// One linear weight in the Marlin layout. Immutable once packed.
class MarlinWeight {
 public:
  /// Repack a canonical weight; throws UNSUPPORTED for what Marlin cannot represent (a zero
  /// point of 2^bits, zero points with act-order, shapes outside its rules).
  static MarlinWeight pack(const sdk::QuantWeight& w);

  int bits() const { return bits_; }
  int64_t N() const { return N_; }
  int64_t width() const { return K_; }
  /// Row k of the layout holds input channel input_columns()[k]; empty without act-order.
  const std::vector<int32_t>& input_columns() const { return columns_; }
  int64_t chunk_count() const { return int64_t(chunks_.size()); }
  sdk::portable::KRange chunk(int64_t c) const { return chunks_[size_t(c)]; }
  /// Dequantize chunk c (8 tile rows), columns [n0, n0 + 64), from the permuted packed runs and
  /// the permuted scales / zero points.
  void decode(int64_t c, int64_t n0, int64_t n1, float* tile) const;
  size_t bytes() const;

  /// The repacked words [K/16][N*bits/2], scales [G][N] and zero points (for tests).
  const std::vector<uint32_t>& qweight() const { return qweight_; }
  const std::vector<float>& scales() const { return scales_; }
  const std::vector<uint32_t>& zero_points() const { return zp_; }
  bool has_zero_points() const { return !zp_.empty(); }

 private:
  int64_t group_of(int64_t k) const;
  float scale_of(int64_t g, int64_t n) const;
  int zero_of(int64_t g, int64_t n) const;

  int bits_ = 4, pack_ = 8;
  int64_t K_ = 0, N_ = 0, group_size_ = -1;
  std::vector<uint32_t> qweight_;
  std::vector<float> scales_;
  std::vector<uint32_t> zp_;
  std::vector<int32_t> columns_;
  std::vector<int32_t> sorted_groups_;  // act-order: group of layout row k (Marlin's sorted g_idx)
  std::vector<sdk::portable::KRange> chunks_;
  // Decode tables: where each run position lands and where each output's scale / zero lives.
  std::array<int16_t, kMarlinRun> run_row_{}, run_col_{};
  std::vector<int64_t> scale_pos_, zp_word_;
  std::vector<int8_t> zp_shift_;
};

}  // namespace nibble::gpu_ref
