// AVX-512 helpers shared by the AVX-512 and AMX micro-kernel files (included only by files built
// with the AVX-512 flags): nibble unpacking, scale/zero decoding and masked output stores.
#pragma once

#include "kernel_api.hpp"

#include <immintrin.h>

namespace nibble::cpu_amx::avx512 {

/// Nibble s (0..3) of every 16-bit word, OR-ed into 0x4300: the bf16 value 128 + nibble.
template <int S>
inline __m512i nibble_bf16(__m512i w) {
  const __m512i low = _mm512_set1_epi16(0x000F), bias = _mm512_set1_epi16(0x4300);
  if constexpr (S == 0) {
    return _mm512_ternarylogic_epi32(w, low, bias, 0xEA);  // (w & low) | bias
  } else {
    return _mm512_ternarylogic_epi32(_mm512_srli_epi16(w, 4 * S), low, bias, 0xEA);
  }
}

/// Nibbles 0-3 of every 16-bit word as four bf16 rows (128 + q each). Measured against
/// VPMULTISHIFTQB in place of the shifts (docs/cpu_amx.md): no faster streaming, 25 % slower tile
/// unpacking, so plain shifts.
inline void nibbles_bf16_all(__m512i w, __m512i* n0, __m512i* n1, __m512i* n2, __m512i* n3) {
  *n0 = nibble_bf16<0>(w);
  *n1 = nibble_bf16<1>(w);
  *n2 = nibble_bf16<2>(w);
  *n3 = nibble_bf16<3>(w);
}

/// A 4-bit plane's 64-byte chunk as two VNNI-4 byte vectors: low nibbles (slots 0,4,1,5 of every
/// column's dword) and high nibbles (slots 2,6,3,7).
inline void nibbles_u8(__m512i w, __m512i* lo, __m512i* hi) {
  const __m512i m = _mm512_set1_epi8(0x0F);
  *lo = _mm512_and_si512(w, m);
  *hi = _mm512_and_si512(_mm512_srli_epi16(w, 4), m);
}

/// The same for an 8-bit weight stored as a low-nibble plane and a high-nibble plane: full bytes.
inline void bytes_u8(__m512i wl, __m512i wh, __m512i* lo, __m512i* hi) {
  const __m512i m = _mm512_set1_epi8(0x0F);
  // select(m ? a : c) = ternlog(a, m, c, 0xE2)
  *lo = _mm512_ternarylogic_epi32(wl, m, _mm512_slli_epi16(wh, 4), 0xE2);
  *hi = _mm512_ternarylogic_epi32(_mm512_srli_epi16(wl, 4), m, wh, 0xE2);
}

/// How far ahead of its reads each weight stream prefetches into L1. Measured on the AMX host:
/// the streaming kernels (4096×14336, M = 1 and 4, alternating builds) ran 5–10 % faster than
/// with 2 KB and 10–15 % faster than with 8 KB into L2 or none; the tile path at 16 threads read
/// 2 KB into L1 and 8 KB into L2 the same within the noise (docs/cpu_amx.md).
constexpr size_t kStreamPrefetch = 4096;

/// Prefetch into L1, in each of NP panel streams that start at `base` and lie panel_bytes apart,
/// the bytes of one k-tile (all `planes`) kStreamPrefetch past k-tile t. Near a panel's end a
/// stream continues where a walk over groups of NP panels goes next, the same stream of the next
/// group (panels are contiguous). Addresses are integers: past the weight's end they point at
/// nothing, and a prefetch never faults.
template <int NP>
inline void prefetch_streams(const uint8_t* base, size_t panel_bytes, int planes, int64_t t) {
  const size_t tile_bytes = size_t(planes) * kTileBytes;
  const size_t ahead = size_t(t) * tile_bytes + kStreamPrefetch;
  const size_t at = ahead < panel_bytes ? ahead : ahead + size_t(NP - 1) * panel_bytes;
  const uintptr_t b = reinterpret_cast<uintptr_t>(base) + at;
  for (int j = 0; j < NP; ++j)
    for (size_t l = 0; l < tile_bytes; l += 64)
      _mm_prefetch(reinterpret_cast<const char*>(b + j * panel_bytes + l), _MM_HINT_T0);
}

/// Scale (fp32) and zero point (as fp32 or int32) of a panel's 16 columns in a group.
inline __m512 load_scale(const PackedLinear& w, int64_t panel, int64_t group) {
  if (w.scale_format == PackedLinear::ScaleFormat::f32)
    return _mm512_castsi512_ps(_mm512_loadu_si512(w.words_of(panel, group)));
  const __m256i halfs =
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.halfs_of(panel, group)));
  if (w.scale_format == PackedLinear::ScaleFormat::f16) return _mm512_cvtph_ps(halfs);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(halfs), 16));  // bf16
}
inline __m512i load_zero_i32(const PackedLinear& w, int64_t panel, int64_t group) {
  return _mm512_cvtepu8_epi32(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(w.zeros_of(panel, group))));
}

/// Store 16 results of row m from column n0, dropping columns ≥ N.
inline void store16(const OutputView& y, int64_t m, int64_t n0, __m512 v) {
  const int64_t left = y.N - n0;
  const __mmask16 mask = left >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1);
  const size_t at = y.offset(m, n0);
  if (y.dtype.bits == 32) {
    _mm512_mask_storeu_ps(reinterpret_cast<float*>(y.data) + at, mask, v);
  } else if (y.dtype.code == kDLBfloat) {
    __m256i h = (__m256i)_mm512_cvtneps_pbh(v);
    _mm256_mask_storeu_epi16(reinterpret_cast<uint16_t*>(y.data) + at, mask, h);
  } else {
    __m256i h = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm256_mask_storeu_epi16(reinterpret_cast<uint16_t*>(y.data) + at, mask, h);
  }
}

inline __m512 load_bias(const PackedLinear& w, int64_t panel) {
  return w.bias.size() ? _mm512_loadu_ps(w.bias.data() + panel * kPanel) : _mm512_setzero_ps();
}

/// Broadcast 4 bytes (a bf16 pair, or 4 int8) found at p.
inline __m512i bcast32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

}  // namespace nibble::cpu_amx::avx512
