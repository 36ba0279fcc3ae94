// Test support: the W4A8 oracle (docs/formats.md#the-w4a8-oracle), written from the definition in
// docs/formats.md#w4a8-numerics alone (no kernel code): per-token
// int8 activations (amax ≥ 1e-7, sa = amax/127, q = round-half-even(x · 127/amax)), exact integer
// dot products per k-block of min(group size, 128) inputs, and the fp32 epilogue
// C = bias; C += (float(acc) · sa) · s per block in order — no fused multiply-add, so a file that
// includes this must be compiled with -ffp-contract=off. With act-order, blocks are cut in the
// order of channels sorted by group (stable), which is the definition itself for the identity
// grouping.
#pragma once

#include "reference.hpp"

#include <cmath>
#include <cstdint>
#include <vector>

namespace nibble::test {

/// Step 1 of the definition for one row: the int8 values and the scale sa.
inline void w4a8_quantize_row(const double* x, int64_t K, std::vector<int32_t>* q, float* sa) {
  float amax = 0.f;
  for (int64_t k = 0; k < K; ++k) amax = std::max(amax, std::fabs(float(x[k])));
  amax = std::max(amax, 1e-7f);
  *sa = amax / 127.f;
  const float inv = 127.f / amax;
  q->resize(size_t(K));
  for (int64_t k = 0; k < K; ++k) {
    float v = float(x[k]) * inv;
    (*q)[size_t(k)] = int32_t(std::nearbyint(v));
  }
}

/// The fp32 accumulators C[M][N] of the W4A8 arithmetic (before rounding to the output dtype).
/// `x` holds the activations exactly (as double), as `Activations::values` does.
inline std::vector<float> w4a8_oracle(const CanonicalWeight& w, const std::vector<double>& x,
                                      int64_t M) {
  const int64_t K = w.K, N = w.N;
  const int64_t gs = w.group_size > 0 ? w.group_size : K;
  const int64_t block = std::min<int64_t>(gs, 128);
  // Channels sorted by group (stable), then blocks of `block` within each group.
  std::vector<std::vector<int64_t>> blocks;
  std::vector<int64_t> block_group;
  for (int64_t g = 0; g < w.num_groups; ++g) {
    std::vector<int64_t> members;
    for (int64_t k = 0; k < K; ++k)
      if (w.group_of(k) == g) members.push_back(k);
    for (size_t i = 0; i < members.size(); i += size_t(block)) {
      size_t e = std::min(members.size(), i + size_t(block));
      blocks.emplace_back(members.begin() + long(i), members.begin() + long(e));
      block_group.push_back(g);
    }
  }
  std::vector<float> C(size_t(M * N));
  std::vector<int32_t> q;
  for (int64_t m = 0; m < M; ++m) {
    float sa;
    w4a8_quantize_row(&x[size_t(m * K)], K, &q, &sa);
    for (int64_t n = 0; n < N; ++n) {
      float c = float(w.bias_at(n));
      for (size_t b = 0; b < blocks.size(); ++b) {
        const int64_t g = block_group[b];
        const int32_t z = w.zeros[size_t(g * N + n)];
        int32_t acc = 0;
        for (int64_t k : blocks[b]) acc += q[size_t(k)] * (int32_t(w.q[size_t(n * K + k)]) - z);
        const float s = float(w.scale(g, n));
        const float t1 = float(acc) * sa;
        const float t2 = t1 * s;
        c = c + t2;
      }
      C[size_t(m * N + n)] = c;
    }
  }
  return C;
}

}  // namespace nibble::test
