// The compute side of the Marlin layout: every packed position of a 1024-value run is sent back
// to the (row, output) the permutation took it from, with its scale and zero point read from
// their permuted arrays — so a wrong repack shows up as a wrong product, not as a silent pass.
#include "marlin_layout.hpp"

#include <algorithm>

namespace nibble::gpu_ref {

int64_t MarlinWeight::group_of(int64_t k) const {
  if (!packed_.groups.empty()) return packed_.groups[size_t(k)];
  return packed_.group_size == -1 ? 0 : k / packed_.group_size;
}

float MarlinWeight::scale_of(int64_t g, int64_t n) const {
  return packed_.scales[size_t(g * packed_.N + packed_.scale_position[size_t(n)])];
}

int MarlinWeight::zero_of(int64_t g, int64_t n) const {
  const int bits = packed_.bits;
  if (packed_.zeros.empty()) return 1 << (bits - 1);  // uint4b8 / uint8b128
  const uint32_t word =
      packed_.zeros[size_t(g * (packed_.N * bits / 32) + packed_.zero_word[size_t(n)])];
  return int((word >> packed_.zero_shift[size_t(n)]) & ((1u << bits) - 1u));
}

void MarlinWeight::decode(int64_t c, int64_t n0, int64_t n1, float* tile) const {
  const sdk::portable::KRange r = chunks_[size_t(c)];
  if (n0 % kMarlinRunOutputs != 0 || n1 - n0 != kMarlinRunOutputs)
    throw sdk::PluginError(NIBBLE_INTERNAL, "marlin decode: output block must be one 64-wide run");
  const int bits = packed_.bits, pack = 32 / bits;
  const int64_t row_values = packed_.N * kMarlinTile, run = n0 / kMarlinRunOutputs;
  const uint32_t mask = (1u << bits) - 1u;
  for (int64_t kt = r.begin / kMarlinTile; kt < r.end / kMarlinTile; ++kt) {
    // Scale and zero of the 16 rows × 64 outputs of this run, then the run's values.
    float scale[kMarlinTile][kMarlinRunOutputs];
    int zero[kMarlinTile][kMarlinRunOutputs];
    int64_t previous_group = -1;
    for (int64_t i = 0; i < kMarlinTile; ++i) {
      const int64_t g = group_of(kt * kMarlinTile + i);
      if (g == previous_group) {  // rows of one group share their scales and zeros
        std::copy(scale[i - 1], scale[i - 1] + kMarlinRunOutputs, scale[i]);
        std::copy(zero[i - 1], zero[i - 1] + kMarlinRunOutputs, zero[i]);
        continue;
      }
      previous_group = g;
      for (int64_t j = 0; j < kMarlinRunOutputs; ++j) {
        scale[i][j] = scale_of(g, n0 + j);
        zero[i][j] = zero_of(g, n0 + j);
      }
    }
    const int64_t first = kt * row_values + run * kMarlinRun;
    for (int64_t p = 0; p < kMarlinRun; ++p) {
      const uint32_t word = packed_.qweight[size_t((first + p) / pack)];
      const int q = int((word >> (bits * ((first + p) % pack))) & mask);
      const int64_t i = run_row_[size_t(p)], j = run_col_[size_t(p)];
      tile[(kt * kMarlinTile + i - r.begin) * kMarlinRunOutputs + j] =
          float(q - zero[i][j]) * scale[i][j];
    }
  }
}

}  // namespace nibble::gpu_ref
