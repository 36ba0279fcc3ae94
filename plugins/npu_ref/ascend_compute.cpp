// The compute side of the Ascend layout: ANTIQUANT(w) = (w + offset) · scale, read straight from
// the packed int8 / int4 rows, in fp32 (the products feed the fp32 accumulation of
// portable_gemm.hpp, as the cube unit accumulates in fp32).
#include "ascend_layout.hpp"

namespace nibble::npu_ref {

void AscendWeight::decode(int64_t c, int64_t n0, int64_t n1, float* tile) const {
  const sdk::portable::KRange r = chunks_[size_t(c)];
  const int64_t g = chunk_group_[size_t(c)];
  const int64_t nb = n1 - n0;
  const float* scale = &scale_[size_t(g * N_)];
  const float* offset = &offset_[size_t(g * N_)];
  for (int64_t k = r.begin; k < r.end; ++k) {
    const uint8_t* row = &weight_[size_t(k * row_bytes_)];
    float* out = tile + (k - r.begin) * nb;
    if (bits_ == 8) {
      for (int64_t n = n0; n < n1; ++n)
        out[n - n0] = (float(int8_t(row[n])) + offset[n]) * scale[n];
      continue;
    }
    for (int64_t n = n0; n < n1; ++n) {
      const uint8_t byte = row[n / 2];
      const int w = n % 2 == 0 ? int8_t(uint8_t(byte << 4)) >> 4 : int8_t(byte) >> 4;
      out[n - n0] = (float(w) + offset[n]) * scale[n];
    }
  }
}

}  // namespace nibble::npu_ref
