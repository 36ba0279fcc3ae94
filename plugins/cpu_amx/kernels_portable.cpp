// Portable C++ micro-kernels: the fallback on any x86-64 CPU and the plainest statement of the
// arithmetic the vector kernels implement. Built with -ffp-contract=off: the W4A8 epilogue must
// round each multiply and add on its own (docs/formats.md#w4a8-numerics, step 4).
#include "kernel_api.hpp"

#include <vector>

namespace nibble::cpu_amx {

namespace {

// Every row's outputs of panel p start at the bias (0 without one).
void start_with_bias(const PackedLinear& w, int64_t p, int64_t rows, std::vector<float>& out) {
  for (int64_t r = 0; r < rows; ++r)
    for (int c = 0; c < kPanel; ++c)
      out[size_t(r) * kPanel + size_t(c)] = w.bias.size() ? w.bias[size_t(p * kPanel + c)] : 0.f;
}

}  // namespace

void a16_portable(const A16Call& call, int64_t m0, int64_t m1, int64_t p0, int64_t p1) {
  const PackedLinear& w = *call.w;
  uint8_t vals[kPanel][kTileK];
  std::vector<float> acc(size_t(m1 - m0) * kPanel);
  std::vector<float> out(size_t(m1 - m0) * kPanel);
  for (int64_t p = p0; p < p1; ++p) {
    start_with_bias(w, p, m1 - m0, out);
    for (const Chunk& ch : w.a16_chunks) {
      std::fill(acc.begin(), acc.end(), 0.f);
      for (int32_t t = ch.tile0; t < ch.tile0 + ch.ntiles; ++t) {
        unpack_tile_portable(w, p, t, vals);
        for (int64_t m = m0; m < m1; ++m) {
          const uint16_t* x = call.x.x + size_t(m) * size_t(call.x.stride) + size_t(t) * kTileK;
          float xf[kTileK];
          for (int j = 0; j < kTileK; ++j) xf[j] = sdk::bf16_to_f32(x[j]);
          float* a = &acc[size_t(m - m0) * kPanel];
          for (int c = 0; c < kPanel; ++c) {
            float s = 0.f;
            for (int j = 0; j < kTileK; ++j) s += xf[j] * float(vals[c][j]);
            a[c] += s;
          }
        }
      }
      const size_t ci = size_t(&ch - w.a16_chunks.data());
      for (int c = 0; c < kPanel; ++c) {
        float scale;
        int zero;
        scale_and_zero(w, p, ch.group, c, &scale, &zero);
        for (int64_t m = m0; m < m1; ++m) {
          const float xs = call.x.sum[size_t(m) * size_t(call.x.chunks) + ci];
          float& o = out[size_t(m - m0) * kPanel + size_t(c)];
          o += scale * (acc[size_t(m - m0) * kPanel + size_t(c)] - float(zero) * xs);
        }
      }
    }
    for (int64_t m = m0; m < m1; ++m)
      store_portable(call.y, m, p * kPanel, &out[size_t(m - m0) * kPanel]);
  }
}

void a8_portable(const A8Call& call, int64_t m0, int64_t m1, int64_t p0, int64_t p1) {
  const PackedLinear& w = *call.w;
  uint8_t vals[kPanel][kTileK];
  std::vector<int32_t> acc(size_t(m1 - m0) * kPanel);
  std::vector<float> out(size_t(m1 - m0) * kPanel);
  for (int64_t p = p0; p < p1; ++p) {
    start_with_bias(w, p, m1 - m0, out);
    for (size_t ci = 0; ci < w.a8_chunks.size(); ++ci) {
      const Chunk& ch = w.a8_chunks[ci];
      std::fill(acc.begin(), acc.end(), 0);
      for (int32_t t = ch.tile0; t < ch.tile0 + ch.ntiles; ++t) {
        unpack_tile_portable(w, p, t, vals);
        for (int64_t m = m0; m < m1; ++m) {
          const int8_t* x = call.x.q + size_t(m) * size_t(call.x.stride) + size_t(t) * kTileK;
          int32_t* a = &acc[size_t(m - m0) * kPanel];
          for (int c = 0; c < kPanel; ++c) {
            int32_t s = 0;
            for (int j = 0; j < kTileK; ++j)
              s += int32_t(x[(j & ~7) + a8_position(j & 7)]) * int32_t(vals[c][j]);
            a[c] += s;
          }
        }
      }
      for (int c = 0; c < kPanel; ++c) {
        float scale;
        int zero;
        scale_and_zero(w, p, ch.group, c, &scale, &zero);
        for (int64_t m = m0; m < m1; ++m) {
          const int32_t qs = call.x.sum[size_t(m) * size_t(call.x.chunks) + ci];
          const int32_t exact = acc[size_t(m - m0) * kPanel + size_t(c)] - zero * qs;
          float& o = out[size_t(m - m0) * kPanel + size_t(c)];
          const float t1 = float(exact) * call.x.scale[m];
          const float t2 = t1 * scale;
          o = o + t2;
        }
      }
    }
    for (int64_t m = m0; m < m1; ++m)
      store_portable(call.y, m, p * kPanel, &out[size_t(m - m0) * kPanel]);
  }
}

}  // namespace nibble::cpu_amx
