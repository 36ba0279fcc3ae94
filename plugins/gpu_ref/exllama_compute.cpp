// The compute side of the ExLlama layout: each packed word yields `pack` consecutive rows of one
// output (un-shuffling 4-bit positions), dequantized as (q - (stored zero + zero_offset)) · scale
// in fp32 for the fp32 accumulation of portable_gemm.hpp.
#include "exllama_layout.hpp"

namespace nibble::gpu_ref {

void ExllamaWeight::decode(int64_t c, int64_t n0, int64_t n1, float* tile) const {
  const sdk::portable::KRange r = chunks_[size_t(c)];
  const int64_t g = chunk_group_[size_t(c)];
  const int64_t nb = n1 - n0;
  const uint32_t mask = (1u << bits_) - 1u;
  for (int64_t n = n0; n < n1; ++n) {
    const uint32_t zero_word = qzeros_[size_t(g * zero_words_ + n / pack_)];
    const int zero = int((zero_word >> (bits_ * (n % pack_))) & mask) + zero_offset_;
    const float scale = scales_[size_t(g * N_ + n)];
    for (int64_t word_row = r.begin / pack_; word_row < r.end / pack_; ++word_row) {
      const uint32_t word = qweight_[size_t(word_row * N_ + n)];
      for (int p = 0; p < pack_; ++p) {
        const int64_t k = word_row * pack_ + (bits_ == 4 ? kShuffledRow[p] : p);
        const int q = int((word >> (bits_ * p)) & mask);
        tile[(k - r.begin) * nb + (n - n0)] = float(q - zero) * scale;
      }
    }
  }
}

}  // namespace nibble::gpu_ref
