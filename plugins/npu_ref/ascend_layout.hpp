// The Ascend weight-quant layout (docs/backends-reference.md#npu_ref-the-ascend-antiquant-layout),
// as npu_weight_quant_batchmatmul consumes it:
// weights [K][N] as centred signed integers w = q - 2^(bits-1) (int8, or int4 packed two per byte
// along N), and per (group, output) an antiquant scale and an antiquant offset so that
//   W[n][k] = (w + offset) · scale,   offset = 2^(bits-1) - z_eff.
// That offset sign is the one that reproduces (q - z_eff) · scale; upstream's GPTQ NPU path passes
// z_eff - 2^(bits-1), which is only right for symmetric weights (not copied here).
// Act-order weights have their K rows reordered so that groups are contiguous (the Ascend op
// takes one group size along K); activations are gathered into that order at run time.
#pragma once

#include <nibble/sdk/portable_gemm.hpp>
#include <nibble/sdk/weights.hpp>

#include <cstdint>
#include <vector>

namespace nibble::npu_ref {

/// One linear weight in the Ascend layout. Immutable once packed.
class AscendWeight {
 public:
  /// Repack a canonical weight (GPTQ or AWQ alike).
  static AscendWeight pack(const sdk::QuantWeight& w);

  int bits() const { return bits_; }
  int64_t K() const { return K_; }
  int64_t N() const { return N_; }
  /// Staged input columns = K (rows are only reordered, never padded).
  int64_t width() const { return K_; }
  /// Row k of the layout holds input channel input_columns()[k]; empty without act-order.
  const std::vector<int32_t>& input_columns() const { return columns_; }
  int64_t chunk_count() const { return int64_t(chunks_.size()); }
  sdk::portable::KRange chunk(int64_t c) const { return chunks_[size_t(c)]; }
  /// Dequantize rows of chunk c, columns [n0, n1), as (w + offset) · scale in fp32.
  void decode(int64_t c, int64_t n0, int64_t n1, float* tile) const;
  size_t bytes() const;

  /// The centred weight at layout row k, output n (unpacked; for tests and diagnostics).
  int centred(int64_t k, int64_t n) const;
  /// Antiquant offset and scale of (group g, output n).
  float offset(int64_t g, int64_t n) const { return offset_[size_t(g * N_ + n)]; }
  float scale(int64_t g, int64_t n) const { return scale_[size_t(g * N_ + n)]; }

 private:
  int bits_ = 4;
  int64_t K_ = 0, N_ = 0, row_bytes_ = 0;
  std::vector<uint8_t> weight_;  // [K][row_bytes]: int8, or two's-complement int4 pairs
  std::vector<float> scale_;     // [G][N]
  std::vector<float> offset_;    // [G][N], integers: 2^(bits-1) - z_eff
  std::vector<int32_t> columns_;
  std::vector<sdk::portable::KRange> chunks_;  // never cross a group boundary
  std::vector<int64_t> chunk_group_;
};

}  // namespace nibble::npu_ref
