// What a layer's stored zero points tell without decoding it: whether it is symmetric and the
// largest zero it can hold. Layer listings and MoE descriptors are made from these facts.
#pragma once

#include <nibble/checkpoint_scheme.hpp>

#include <cstdint>
#include <vector>

namespace nibble::detail {

/// The stored zero values of one layer, counted.
struct StoredZeros {
  std::vector<int64_t> histogram;  ///< count of each stored value 0 .. 2^bits - 1
  int64_t total = 0;               ///< zero points stored
  bool symmetric = false;          ///< every effective zero point is 2^(bits-1)
  int64_t v1_stored_max = 0;       ///< GPTQ v1 only: stored 2^bits - 1 (decoded as 2^bits)
};

/// The stored zeros of a layer of scheme `kind` whose qzeros (shape already checked) packs N
/// output channels at `bits`. AWQ packs them in another order, but counts the same.
inline StoredZeros stored_zeros(const TensorView& qzeros, SchemeKind kind, int bits, int64_t N) {
  StoredZeros z;
  z.histogram = gptq_stored_zero_histogram(qzeros, bits, N);
  for (int64_t c : z.histogram) z.total += c;
  const size_t half = size_t(1) << (bits - 1);
  const size_t stored_sym = kind == SchemeKind::GptqV1 ? half - 1 : half;
  z.symmetric = z.total > 0 && z.histogram[stored_sym] == z.total;
  if (kind == SchemeKind::GptqV1) z.v1_stored_max = z.histogram.back();
  return z;
}

// The largest effective zero point of weights of `bits` bits, when their stored zeros tell it: a
// GPTQ v1 zero stored as 2^bits - 1 decodes to 2^bits, the most there can be; all symmetric means
// every zero is 2^(bits-1). 0 when neither holds (unknown without decoding).
inline int known_max_zero(int bits, bool symmetric, bool v1_stored_max) {
  if (bits <= 0) return 0;
  if (v1_stored_max) return 1 << bits;
  return symmetric ? 1 << (bits - 1) : 0;
}

}  // namespace nibble::detail
