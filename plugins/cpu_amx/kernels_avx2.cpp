// AVX2 + FMA micro-kernels, for x86 CPUs without the AVX-512 subset cpu_amx needs. W4A16: nibbles
// to fp32 and FMA (the lanes hold (column, k-parity) pairs, folded at each group's epilogue).
// W4A8: VPMADDUBSW on nibble planes (≤ 15 × 127, no saturation) then VPMADDWD, exact int32 sums,
// and the same epilogue as every W4A8 path. Built with -ffp-contract=off (step 4 of
// docs/formats.md#w4a8-numerics).
#include "kernel_api.hpp"

#include <immintrin.h>

namespace nibble::cpu_amx {
namespace {

constexpr int kMr = 4;

__m256 load_bias8(const PackedLinear& w, int64_t panel, int half) {
  return w.bias.size() ? _mm256_loadu_ps(w.bias.data() + panel * kPanel + 8 * half)
                       : _mm256_setzero_ps();
}

void store8(const OutputView& y, int64_t m, int64_t n0, __m256 v) {
  float tmp[8];
  _mm256_storeu_ps(tmp, v);
  store_portable_n(y, m, n0, tmp, 8);
}

// 8 scales and zero points (as fp32 / int32) of columns [8·half, 8·half + 8) of a panel's group.
void scale_zero8(const PackedLinear& w, int64_t panel, int64_t group, int half, __m256* s,
                 __m256i* z) {
  *z = _mm256_cvtepu8_epi32(
      _mm_loadl_epi64(reinterpret_cast<const __m128i*>(w.zeros_of(panel, group) + 8 * half)));
  if (w.scale_format == PackedLinear::ScaleFormat::f32) {
    *s = _mm256_castsi256_ps(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.words_of(panel, group) + 8 * half)));
    return;
  }
  const __m128i halfs =
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(w.halfs_of(panel, group) + 8 * half));
  *s = w.scale_format == PackedLinear::ScaleFormat::f16
           ? _mm256_cvtph_ps(halfs)
           : _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(halfs), 16));
}

// (x[k], x[k+1]) as fp32, repeated over the 8 lanes (bf16 → fp32 is a 16-bit shift).
__m256 bf16_pair(const uint16_t* p) {
  int32_t d;
  std::memcpy(&d, p, 4);
  const __m256i v = _mm256_set1_epi32(d);
  return _mm256_castsi256_ps(_mm256_blend_epi32(
      _mm256_slli_epi32(v, 16), _mm256_and_si256(v, _mm256_set1_epi32(int(0xFFFF0000u))), 0xAA));
}

void a16_rows(const A16Call& call, int64_t m0, int mr, int64_t p) {
  const PackedLinear& w = *call.w;
  __m256 out[kMr][2];
  for (int m = 0; m < mr; ++m)
    for (int h = 0; h < 2; ++h) out[m][h] = load_bias8(w, p, h);
  // Nibbles are used as their values here (not 128 + q), so the zero term is z · Σx.
  for (size_t ci = 0; ci < w.a16_chunks.size(); ++ci) {
    const Chunk& ch = w.a16_chunks[ci];
    // acc[m][plane][g]: lanes are words 8g..8g+7 of a chunk: (column 4g + lane/2, parity lane%2).
    __m256 acc[kMr][2][4];
    for (int m = 0; m < mr; ++m)
      for (int l = 0; l < 2; ++l)
        for (int g = 0; g < 4; ++g) acc[m][l][g] = _mm256_setzero_ps();
    for (int32_t t = ch.tile0; t < ch.tile0 + ch.ntiles; ++t) {
      const uint8_t* tp = w.tile(p, t);
      for (int l = 0; l < w.planes; ++l)
        for (int u = 0; u < 4; ++u) {
          __m256i words[4];
          for (int g = 0; g < 4; ++g)
            words[g] = _mm256_cvtepu16_epi32(_mm_loadu_si128(
                reinterpret_cast<const __m128i*>(tp + l * kTileBytes + u * 64 + 16 * g)));
          for (int s = 0; s < 4; ++s) {
            __m256 v[4];
            for (int g = 0; g < 4; ++g)
              v[g] = _mm256_cvtepi32_ps(_mm256_and_si256(
                  _mm256_srlv_epi32(words[g], _mm256_set1_epi32(4 * s)), _mm256_set1_epi32(0xF)));
            for (int m = 0; m < mr; ++m) {
              const __m256 xp = bf16_pair(call.x.x + size_t(m0 + m) * size_t(call.x.stride) +
                                          size_t(t) * kTileK + 8 * u + 2 * s);
              for (int g = 0; g < 4; ++g) acc[m][l][g] = _mm256_fmadd_ps(xp, v[g], acc[m][l][g]);
            }
          }
        }
    }
    // Fold parities: column c = lanes (2c, 2c+1) of acc[c / 4]. Planes combine as 16·hi + lo.
    for (int m = 0; m < mr; ++m) {
      float lanes[2][32] = {}, colsum[16];
      for (int l = 0; l < w.planes; ++l)
        for (int g = 0; g < 4; ++g) _mm256_storeu_ps(&lanes[l][8 * g], acc[m][l][g]);
      for (int c = 0; c < 16; ++c) {
        colsum[c] = lanes[0][2 * c] + lanes[0][2 * c + 1];
        if (w.planes == 2) colsum[c] += 16.f * (lanes[1][2 * c] + lanes[1][2 * c + 1]);
      }
      const __m256 xs = _mm256_set1_ps(call.x.sum[size_t(m0 + m) * size_t(call.x.chunks) + ci]);
      for (int h = 0; h < 2; ++h) {
        __m256 s;
        __m256i z;
        scale_zero8(w, p, ch.group, h, &s, &z);
        const __m256 a = _mm256_loadu_ps(colsum + 8 * h);
        out[m][h] = _mm256_fmadd_ps(s, _mm256_fnmadd_ps(_mm256_cvtepi32_ps(z), xs, a), out[m][h]);
      }
    }
  }
  for (int m = 0; m < mr; ++m)
    for (int h = 0; h < 2; ++h) store8(call.y, m0 + m, p * kPanel + 8 * h, out[m][h]);
}

void a8_rows(const A8Call& call, int64_t m0, int mr, int64_t p) {
  const PackedLinear& w = *call.w;
  const __m256i ones = _mm256_set1_epi16(1), mask = _mm256_set1_epi8(0x0F);
  __m256 out[kMr][2];
  for (int m = 0; m < mr; ++m)
    for (int h = 0; h < 2; ++h) out[m][h] = load_bias8(w, p, h);
  for (size_t ci = 0; ci < w.a8_chunks.size(); ++ci) {
    const Chunk& ch = w.a8_chunks[ci];
    __m256i acc[kMr][2][2];  // [row][plane][half: columns 0-7, 8-15]
    for (int m = 0; m < mr; ++m)
      for (int l = 0; l < 2; ++l)
        for (int h = 0; h < 2; ++h) acc[m][l][h] = _mm256_setzero_si256();
    for (int32_t t = ch.tile0; t < ch.tile0 + ch.ntiles; ++t) {
      const uint8_t* tp = w.tile(p, t);
      for (int l = 0; l < w.planes; ++l)
        for (int u = 0; u < 4; ++u)
          for (int h = 0; h < 2; ++h) {
            const __m256i wv = _mm256_loadu_si256(
                reinterpret_cast<const __m256i*>(tp + l * kTileBytes + u * 64 + 32 * h));
            const __m256i lo = _mm256_and_si256(wv, mask);
            const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(wv, 4), mask);
            for (int m = 0; m < mr; ++m) {
              const int8_t* xq =
                  call.x.q + size_t(m0 + m) * size_t(call.x.stride) + size_t(t) * kTileK + 8 * u;
              int32_t dl, dh;
              std::memcpy(&dl, xq, 4);
              std::memcpy(&dh, xq + 4, 4);
              const __m256i pl =
                  _mm256_madd_epi16(_mm256_maddubs_epi16(lo, _mm256_set1_epi32(dl)), ones);
              const __m256i ph =
                  _mm256_madd_epi16(_mm256_maddubs_epi16(hi, _mm256_set1_epi32(dh)), ones);
              acc[m][l][h] = _mm256_add_epi32(acc[m][l][h], _mm256_add_epi32(pl, ph));
            }
          }
    }
    for (int h = 0; h < 2; ++h) {
      __m256 s;
      __m256i z;
      scale_zero8(w, p, ch.group, h, &s, &z);
      for (int m = 0; m < mr; ++m) {
        __m256i a = acc[m][0][h];
        if (w.planes == 2) a = _mm256_add_epi32(a, _mm256_slli_epi32(acc[m][1][h], 4));
        const __m256i qs =
            _mm256_set1_epi32(call.x.sum[size_t(m0 + m) * size_t(call.x.chunks) + ci]);
        const __m256i exact = _mm256_sub_epi32(a, _mm256_mullo_epi32(z, qs));
        const __m256 t1 =
            _mm256_mul_ps(_mm256_cvtepi32_ps(exact), _mm256_set1_ps(call.x.scale[m0 + m]));
        const __m256 t2 = _mm256_mul_ps(t1, s);
        out[m][h] = _mm256_add_ps(out[m][h], t2);
      }
    }
  }
  for (int m = 0; m < mr; ++m)
    for (int h = 0; h < 2; ++h) store8(call.y, m0 + m, p * kPanel + 8 * h, out[m][h]);
}

}  // namespace

void a16_avx2(const A16Call& call, int64_t m0, int64_t m1, int64_t p0, int64_t p1) {
  for (int64_t p = p0; p < p1; ++p)
    for (int64_t m = m0; m < m1; m += kMr)
      a16_rows(call, m, int(std::min<int64_t>(kMr, m1 - m)), p);
}

void a8_avx2(const A8Call& call, int64_t m0, int64_t m1, int64_t p0, int64_t p1) {
  for (int64_t p = p0; p < p1; ++p)
    for (int64_t m = m0; m < m1; m += kMr) a8_rows(call, m, int(std::min<int64_t>(kMr, m1 - m)), p);
}

}  // namespace nibble::cpu_amx
