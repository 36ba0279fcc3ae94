// gpu_ref's Marlin weight: the SDK's Marlin packer (<nibble/sdk/layouts/marlin.hpp>, the layout
// vLLM's gptq_marlin_repack / marlin_permute_scales / marlin_zero_points produce) plus the decode
// tables that let portable C++ compute from the packed words, permuted scales and zero points.
#pragma once

#include <nibble/sdk/layouts/marlin.hpp>
#include <nibble/sdk/portable_gemm.hpp>
#include <nibble/sdk/weights.hpp>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace nibble::gpu_ref {

constexpr int64_t kMarlinTile = sdk::marlin::kTile;
constexpr int64_t kMarlinRunOutputs = sdk::marlin::kRunOutputs;
constexpr int64_t kMarlinRun = sdk::marlin::kRun;

/// One linear weight in the Marlin layout. Immutable once packed.
class MarlinWeight {
 public:
  /// Repack a canonical weight; throws UNSUPPORTED for what Marlin cannot represent (a zero
  /// point of 2^bits, zero points with act-order, shapes outside its rules).
  static MarlinWeight pack(const sdk::QuantWeight& w);

  int bits() const { return packed_.bits; }
  int64_t N() const { return packed_.N; }
  int64_t width() const { return packed_.K; }
  /// Row k of the layout holds input channel input_columns()[k]; empty without act-order.
  const std::vector<int32_t>& input_columns() const { return packed_.columns; }
  int64_t chunk_count() const { return int64_t(chunks_.size()); }
  sdk::portable::KRange chunk(int64_t c) const { return chunks_[size_t(c)]; }
  /// Dequantize chunk c (8 tile rows), columns [n0, n0 + 64), from the permuted packed runs and
  /// the permuted scales / zero points.
  void decode(int64_t c, int64_t n0, int64_t n1, float* tile) const;
  size_t bytes() const { return packed_.bytes(sizeof(float)); }

  /// The repacked words [K/16][N*bits/2], scales [G][N] and zero points (for tests).
  const std::vector<uint32_t>& qweight() const { return packed_.qweight; }
  const std::vector<float>& scales() const { return packed_.scales; }
  const std::vector<uint32_t>& zero_points() const { return packed_.zeros; }
  bool has_zero_points() const { return !packed_.zeros.empty(); }

 private:
  int64_t group_of(int64_t k) const;
  float scale_of(int64_t g, int64_t n) const;
  int zero_of(int64_t g, int64_t n) const;

  sdk::marlin::Packed packed_;
  std::vector<sdk::portable::KRange> chunks_;
  // Where each run position lands (row within the tile row, output within the run).
  std::array<int16_t, kMarlinRun> run_row_{}, run_col_{};
};

}  // namespace nibble::gpu_ref
