// The ExLlama layout of GPTQ-like weights as vLLM/sglang's gptq_gemm uses it
// (docs/backends-reference.md#exllama):
//  * rows made sequential by group: q_perm = argsort(g_idx) (stable) for act-order, so every group
//    is one contiguous run of K; activations are gathered through q_perm at run time;
//  * qweight [K/pack][N] uint32 packed along K (pack = 8 for 4-bit, 4 for 8-bit), and for 4-bit
//    every word nibble-shuffled (shuffle_4bit_8): original nibbles 0,2,4,6 in positions 0..3 and
//    1,3,5,7 in positions 4..7, which the dequantizer reads as half2 pairs;
//  * qzeros [G][N/pack] packed along N, stored as z - zero_offset with zero_offset 1 for GPTQ v1
//    style zero points (1..2^bits, vLLM's default) or 0 for v2 style (0..2^bits-1, use_v2_format);
//  * scales [G][N], kept in fp32 (checkpoint precision: docs/formats.md#scale-precision).
// Where ExLlama itself needs K % group == 0 and K % pack == 0, each group's run here is padded to
// whole words with zero activations, which is ExLlama's layout exactly when those hold.
#pragma once

#include <nibble/sdk/portable_gemm.hpp>
#include <nibble/sdk/weights.hpp>

#include <cstdint>
#include <vector>

namespace nibble::gpu_ref {

/// Nibble position p of a shuffled 4-bit word holds the value of row (word * 8 + kShuffledRow[p]).
inline constexpr int kShuffledRow[8] = {0, 2, 4, 6, 1, 3, 5, 7};

/// One linear weight in the ExLlama layout. Immutable once packed.
class ExllamaWeight {
 public:
  /// Repack a canonical weight; throws UNSUPPORTED when its zero points span both 0 and 2^bits
  /// (no zero_offset stores both in `bits` bits).
  static ExllamaWeight pack(const sdk::QuantWeight& w);

  int bits() const { return bits_; }
  int64_t N() const { return N_; }
  /// Staged input columns: K with each group padded to whole words.
  int64_t width() const { return width_; }
  /// Staged column j holds x column input_columns()[j] (q_perm), or -1 for padding; empty when
  /// that is the identity (no act-order, no padding).
  const std::vector<int32_t>& input_columns() const { return columns_; }
  int64_t chunk_count() const { return int64_t(chunks_.size()); }
  sdk::portable::KRange chunk(int64_t c) const { return chunks_[size_t(c)]; }
  /// Dequantize chunk c, columns [n0, n1), as (q - z) · scale in fp32, from the packed words.
  void decode(int64_t c, int64_t n0, int64_t n1, float* tile) const;
  size_t bytes() const;

  /// The packed words (for tests): qweight [width/pack][N], qzeros [G][ceil(N/pack)].
  const std::vector<uint32_t>& qweight() const { return qweight_; }
  const std::vector<uint32_t>& qzeros() const { return qzeros_; }
  int zero_offset() const { return zero_offset_; }

 private:
  int bits_ = 4, pack_ = 8, zero_offset_ = 1;
  int64_t N_ = 0, width_ = 0, zero_words_ = 0;
  std::vector<uint32_t> qweight_;
  std::vector<uint32_t> qzeros_;
  std::vector<float> scales_;
  std::vector<int32_t> columns_;
  std::vector<sdk::portable::KRange> chunks_;
  std::vector<int64_t> chunk_group_;
};

}  // namespace nibble::gpu_ref
