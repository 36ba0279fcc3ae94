// AVX-512 row kernels of activation preparation: the same bits as the portable ones in
// activations.cpp (see activation_rows.hpp), 16 values per instruction. Built with
// -ffp-contract=off like every file whose arithmetic order is specified.
#include "activation_rows.hpp"

#include <immintrin.h>

#include <cstring>
#include <limits>
#include <stdexcept>

namespace nibble::cpu_amx {
namespace {

void widen(const void* src, DLDataType dtype, int64_t n, float* out) {
  if (dtype.bits == 32) {
    std::memcpy(out, src, size_t(n) * sizeof(float));
    return;
  }
  const auto* h = static_cast<const uint16_t*>(src);
  const bool bf16 = dtype.code == kDLBfloat;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(h + i));
    const __m512 f = bf16 ? _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16))
                          : _mm512_cvtph_ps(v);
    _mm512_storeu_ps(out + i, f);
  }
  if (i < n) {
    const __mmask16 m = __mmask16((1u << (n - i)) - 1);
    const __m256i v = _mm256_maskz_loadu_epi16(m, h + i);
    const __m512 f = bf16 ? _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16))
                          : _mm512_cvtph_ps(v);
    _mm512_mask_storeu_ps(out + i, m, f);
  }
}

// sdk::f32_to_bf16 on 16 lanes: u + 0x7FFF + bit 16, NaN → (u >> 16) | 0x40.
inline __m256i bf16_of(__m512 f) {
  const __m512i u = _mm512_castps_si512(f);
  const __m512i mag = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(mag, _mm512_set1_epi32(0x7f800000));
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i r =
      _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb), 16);
  r = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
  return _mm512_cvtepi32_epi16(r);
}

void to_bf16(const float* in, int64_t n, uint16_t* out) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), bf16_of(_mm512_loadu_ps(in + i)));
  if (i < n) {
    const __mmask16 m = __mmask16((1u << (n - i)) - 1);
    _mm256_mask_storeu_epi16(out + i, m, bf16_of(_mm512_maskz_loadu_ps(m, in + i)));
  }
}

float sum_bf16(const uint16_t* v, int64_t n) {
  __m512 acc = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + i));
    acc = _mm512_add_ps(acc, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)));
  }
  // Fold l += l+8, l += l+4, l += l+2, l += l+1 (once per row part: scalar is fine).
  alignas(64) float lane[16];
  _mm512_store_ps(lane, acc);
  for (int h = 8; h >= 1; h /= 2)
    for (int l = 0; l < h; ++l) lane[l] += lane[l + h];
  return lane[0];
}

float quantize(const float* in, int64_t n, int8_t* out) {
  // max(|x|, amax) in the operand order of std::max(amax, |x|): a NaN leaves amax as it is.
  __m512 amax = _mm512_setzero_ps();
  __mmask16 nan = 0;
  for (int64_t i = 0; i < n; i += 16) {
    const __m512 v = _mm512_loadu_ps(in + i);
    amax = _mm512_max_ps(_mm512_abs_ps(v), amax);
    nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  }
  alignas(64) float lane[16];
  _mm512_store_ps(lane, amax);
  float a = 1e-7f;
  for (float l : lane) a = a > l ? a : l;
  const float sa = a / 127.f;
  const __m512 inv = _mm512_set1_ps(127.f / a);
  const __m512 hi = _mm512_set1_ps(127.f), lo = _mm512_set1_ps(-127.f);
  // Byte p of each 8 takes slot 0,4,1,5,2,6,3,7 (a8_position's inverse).
  const __m128i order = _mm_setr_epi8(0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15);
  for (int64_t i = 0; i < n; i += 16) {
    __m512 r = _mm512_roundscale_ps(_mm512_mul_ps(_mm512_loadu_ps(in + i), inv),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    // std::min(127, std::max(-127, r)): a NaN becomes -127, as in the portable code.
    r = _mm512_min_ps(_mm512_max_ps(r, lo), hi);
    const __m128i q = _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(r));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm_shuffle_epi8(q, order));
  }
  return nan ? std::numeric_limits<float>::quiet_NaN() : sa;
}

// A chunk with a NaN or an infinity (`bad`), or only zeros: zero bytes, step NaN or 1, sum 0.
inline FixedChunk degenerate_chunk(bool bad, int64_t n, int8_t* hi, int8_t* lo) {
  std::memset(hi, 0, size_t(n));
  std::memset(lo, 0, size_t(n));
  return {bad ? std::numeric_limits<float>::quiet_NaN() : 1.f, 0};
}

// 16 values v = round-half-even(x · 2^shift) (`scale` holds the shift), their high and low bytes
// stored at the A8 slot positions; returns v.
inline __m512i fixed_vector(__m512 x, __m512 scale, int8_t* hi, int8_t* lo) {
  const __m128i order = _mm_setr_epi8(0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15);
  const __m512i v = _mm512_cvt_roundps_epi32(_mm512_scalef_ps(x, scale),
                                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512i h = _mm512_srai_epi32(_mm512_add_epi32(v, _mm512_set1_epi32(128)), 8);
  const __m512i l = _mm512_sub_epi32(v, _mm512_slli_epi32(h, 8));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(hi),
                   _mm_shuffle_epi8(_mm512_cvtepi32_epi8(h), order));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(lo),
                   _mm_shuffle_epi8(_mm512_cvtepi32_epi8(l), order));
  return v;
}

// A chunk of `vecs` vectors of 16, load(i) giving vector i (each is loaded twice): the largest
// magnitude, then the conversion, as to_fixed defines them.
template <class Load>
inline FixedChunk fixed_chunk(int64_t vecs, const Load& load, int8_t* hi, int8_t* lo) {
  __m512 amax = _mm512_setzero_ps();
  __mmask16 bad = 0;
  const __m512 inf = _mm512_set1_ps(std::numeric_limits<float>::infinity());
  for (int64_t i = 0; i < vecs; ++i) {
    const __m512 a = _mm512_abs_ps(load(i));
    amax = _mm512_max_ps(a, amax);
    bad |= _mm512_cmp_ps_mask(a, inf, _CMP_NLT_UQ);  // infinite or NaN
  }
  const float a = _mm512_reduce_max_ps(amax);
  if (bad || a == 0.f) return degenerate_chunk(bad, 16 * vecs, hi, lo);
  const int shift = fixed_point_shift(a);
  const __m512 scale = _mm512_set1_ps(float(shift));
  __m512i sum = _mm512_setzero_si512();
  for (int64_t i = 0; i < vecs; ++i)
    sum = _mm512_add_epi32(sum, fixed_vector(load(i), scale, hi + 16 * i, lo + 16 * i));
  return {fixed_point_step(shift), _mm512_reduce_add_epi32(sum)};
}

FixedChunk to_fixed(const float* in, int64_t n, int8_t* hi, int8_t* lo) {
  return fixed_chunk(
      n / 16, [in](int64_t i) { return _mm512_loadu_ps(in + 16 * i); }, hi, lo);
}

// Up to 16 values of an f32, f16 or bf16 row from element `at`, as widen makes them; lanes
// outside `m` are zero and read nothing.
inline __m512 widened(const void* src, DLDataType dtype, int64_t at, __mmask16 m) {
  if (!m) return _mm512_setzero_ps();  // nor forms an address past the source
  if (dtype.bits == 32) return _mm512_maskz_loadu_ps(m, static_cast<const float*>(src) + at);
  const __m256i h = _mm256_maskz_loadu_epi16(m, static_cast<const uint16_t*>(src) + at);
  return dtype.code == kDLBfloat
             ? _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16))
             : _mm512_cvtph_ps(h);
}

// to_fixed with the chunk widened once into registers: the same operations on the same values, so
// the same bits, without writing the widened slots out and reading them twice.
FixedChunk to_fixed_from(const void* src, DLDataType dtype, int64_t valid, int64_t n, int8_t* hi,
                         int8_t* lo) {
  if (n > kMaxFixedSlots || valid > n)
    throw std::logic_error("cpu_amx: a fixed-point chunk of more than 128 slots or values");
  __m512 v[kMaxFixedSlots / 16];
  for (int64_t i = 0; i < n / 16; ++i) {
    const int64_t left = valid - 16 * i;
    const __mmask16 m = left >= 16  ? __mmask16(0xFFFF)
                        : left <= 0 ? __mmask16(0)
                                    : __mmask16((1u << left) - 1);
    v[i] = widened(src, dtype, 16 * i, m);
  }
  return fixed_chunk(
      n / 16, [&v](int64_t i) { return v[i]; }, hi, lo);
}

// 64 bytes a VPDPBUSD against ones (unsigned 1 × signed byte), exact in 32-bit lanes.
int32_t sum_i8(const int8_t* v, int64_t n) {
  const __m512i ones = _mm512_set1_epi8(1);
  __m512i acc = _mm512_setzero_si512();
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) acc = _mm512_dpbusd_epi32(acc, ones, _mm512_loadu_si512(v + i));
  if (i < n) {
    const __mmask64 m = _cvtu64_mask64((uint64_t(1) << (n - i)) - 1);
    acc = _mm512_dpbusd_epi32(acc, ones, _mm512_maskz_loadu_epi8(m, v + i));
  }
  return _mm512_reduce_add_epi32(acc);
}

}  // namespace

RowKernels row_kernels_avx512() {
  return {&widen, &to_bf16, &sum_bf16, &quantize, &to_fixed, &to_fixed_from, &sum_i8};
}

}  // namespace nibble::cpu_amx
