// W4A16 above the dispatcher's crossover (A16Call::dequantize_b) on AMX: B dequantized once to
// bf16, then a plain bf16 tile GEMM with no per-group epilogue (docs/cpu_amx.md, Kernels).
// Built with -ffp-contract=off, as kernels_amx.cpp.
#include "amx_tiles.hpp"

namespace nibble::cpu_amx {
namespace {

using namespace avx512;
using namespace amx_tiles;

// Each weight is dequantized as (q − z)·s with the fp32 scale and rounded once to bf16 (q − z is
// exact in fp32, so is its product with an f16 or bf16 scale; an fp32 scale rounds the product
// to fp32 first). The products accumulate in fp32 tiles with no per-group epilogue. Blocking:
// up to kDqRows rows of A stay in L2 while a group of the slice's panel pairs take turns, as many
// as keep their fp32 accumulators (kDqAccumulatorBytes) in L2 between K blocks; per (K block,
// pair) the pair's bf16 B tiles (kDqTiles k-tiles, 32 KiB) are made once in L1 and serve every
// 32-row block. Dequantizing a pair's next tiles between the tile products of the one before
// (double-buffered, as kernels_amx.cpp's a16_pair does) measured no faster at 16 threads, and
// slower with 8-tile K blocks that keep both buffers in L1 (docs/cpu_amx.md).
constexpr int64_t kDqRows = 512;
constexpr int64_t kDqTiles = 16;
constexpr int64_t kDqAccumulatorBytes = 512 << 10;

// Word i of the result takes word perm[i] of [even results | odd results]: back to k-pairs.
inline __m512i interleave_pairs(__m512i halves) {
  const __m512i perm = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24,
                                        8, 23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  return _mm512_permutexvar_epi16(perm, halves);
}

// GCC 12 inlines _mm512_slli_epi32's _mm512_undefined_epi32() pass-through operand (never read:
// the mask is all ones) and then reports it as uninitialized.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
// One B tile row: 16 columns × a k-pair of unpacked words (128 + q in bf16, or for 8-bit the
// low and high planes) to bf16 (q − z)·s; zt = offset + z per column.
template <int PL>
inline __m512i dequant_row(__m512i lo, __m512i hi, __m512 s, __m512 zt) {
  const __m512i top = _mm512_set1_epi32(int(0xFFFF0000u));
  __m512 even = _mm512_castsi512_ps(_mm512_slli_epi32(lo, 16));
  __m512 odd = _mm512_castsi512_ps(_mm512_and_si512(lo, top));
  if constexpr (PL == 2) {  // 16·(128 + hi) + (128 + lo): exact small integers
    const __m512 sixteen = _mm512_set1_ps(16.f);
    even = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_slli_epi32(hi, 16)), sixteen, even);
    odd = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_and_si512(hi, top)), sixteen, odd);
  }
  even = _mm512_mul_ps(_mm512_sub_ps(even, zt), s);
  odd = _mm512_mul_ps(_mm512_sub_ps(odd, zt), s);
  return interleave_pairs((__m512i)_mm512_cvtne2ps_pbh(odd, even));
}
#pragma GCC diagnostic pop

// The bf16 B tile (16 k-pair rows × 16 columns, 1 KiB) of one panel's k-tile.
template <int PL>
void dequant_tile(const PackedLinear& w, int64_t panel, int64_t ktile, __m512 s, __m512 zt,
                  uint8_t* dst) {
  const uint8_t* src = w.tile(panel, ktile);
  for (int u = 0; u < 4; ++u) {
    __m512i l[4], h[4];
    nibbles_bf16_all(_mm512_loadu_si512(src + u * 64), &l[0], &l[1], &l[2], &l[3]);
    if constexpr (PL == 2)
      nibbles_bf16_all(_mm512_loadu_si512(src + kTileBytes + u * 64), &h[0], &h[1], &h[2], &h[3]);
    for (int r = 0; r < 4; ++r)
      _mm512_store_si512(dst + (4 * u + r) * 64,
                         dequant_row<PL>(l[r], PL == 2 ? h[r] : l[r], s, zt));
  }
}

// C += A · B over `steps` k-tiles for a 32-row block and NP panels; C in c[32][32] fp32 (row
// stride 128 bytes), loaded unless `fresh`.
template <int NP>
void tile_block_bf16_acc(const uint8_t* a, int64_t a_stride, const uint8_t* b, int steps, float* c,
                         bool fresh) {
  char* cc = reinterpret_cast<char*>(c);
  if (fresh) {
    _tile_zero(0);
    _tile_zero(2);
    if constexpr (NP == 2) {
      _tile_zero(1);
      _tile_zero(3);
    }
  } else {
    _tile_loadd(0, cc, 128);
    _tile_loadd(2, cc + 16 * 128, 128);
    if constexpr (NP == 2) {
      _tile_loadd(1, cc + 64, 128);
      _tile_loadd(3, cc + 16 * 128 + 64, 128);
    }
  }
  for (int i = 0; i < steps; ++i) {
    _tile_loadd(4, a + i * 64, a_stride);
    _tile_loadd(5, a + i * 64 + 16 * a_stride, a_stride);
    _tile_loadd(6, b + size_t(i * NP) * kBTile, 64);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(2, 5, 6);
    if constexpr (NP == 2) {
      _tile_loadd(7, b + size_t(i * NP + 1) * kBTile, 64);
      _tile_dpbf16ps(1, 4, 7);
      _tile_dpbf16ps(3, 5, 7);
    }
  }
  _tile_stored(0, cc, 128);
  _tile_stored(2, cc + 16 * 128, 128);
  if constexpr (NP == 2) {
    _tile_stored(1, cc + 64, 128);
    _tile_stored(3, cc + 16 * 128 + 64, 128);
  }
}

template <int PL>
void a16_dequantized(const A16Call& call, int64_t m0, int64_t m1, int64_t p0, int64_t p1) {
  const PackedLinear& w = *call.w;
  TileScope tiles(16);
  const int64_t pairs = (p1 - p0 + 1) / 2;
  const int64_t a_stride = call.x.stride * 2;
  const float offset = a16_weight_offset(PL);
  const int64_t super_rows = std::min<int64_t>(kDqRows, (m1 - m0 + 31) / 32 * 32);
  const int64_t group_pairs = std::max<int64_t>(1, kDqAccumulatorBytes / (super_rows * 32 * 4));
  // Kept per thread: a warm forward allocates nothing.
  thread_local std::vector<uint8_t> bmem, cmem;
  uint8_t* b = aligned_scratch<uint8_t>(bmem, size_t(kDqTiles) * 2 * kBTile);
  float* cacc =
      aligned_scratch<float>(cmem, size_t(std::min(pairs, group_pairs) * super_rows) * 32 * 4);
  for (int64_t ms = m0; ms < m1; ms += kDqRows) {
    const int64_t me = std::min(m1, ms + kDqRows);
    const int64_t blocks = (me - ms + 31) / 32;
    for (int64_t g0 = 0; g0 < pairs; g0 += group_pairs) {
      const int64_t g1 = std::min(pairs, g0 + group_pairs);
      size_t chunk = 0;  // the a16 chunk (group run) holding k-tile kt0
      for (int64_t kt0 = 0; kt0 < w.ktiles; kt0 += kDqTiles) {
        const int64_t kt1 = std::min<int64_t>(w.ktiles, kt0 + kDqTiles);
        const int steps = int(kt1 - kt0);
        while (w.a16_chunks[chunk].tile0 + w.a16_chunks[chunk].ntiles <= kt0) ++chunk;
        for (int64_t pi = g0; pi < g1; ++pi) {
          const int64_t p = p0 + 2 * pi;
          const int np = p + 1 < p1 ? 2 : 1;
          size_t ci = chunk;
          for (int j = 0; j < np; ++j) {
            ci = chunk;
            int32_t group = -1;
            __m512 s = _mm512_setzero_ps(), zt = _mm512_setzero_ps();
            for (int64_t kt = kt0; kt < kt1; ++kt) {
              while (w.a16_chunks[ci].tile0 + w.a16_chunks[ci].ntiles <= kt) ++ci;
              if (w.a16_chunks[ci].group != group) {
                group = w.a16_chunks[ci].group;
                s = load_scale(w, p + j, group);
                zt = _mm512_add_ps(_mm512_cvtepi32_ps(load_zero_i32(w, p + j, group)),
                                   _mm512_set1_ps(offset));
              }
              dequant_tile<PL>(w, p + j, kt, s, zt, b + size_t((kt - kt0) * np + j) * kBTile);
            }
          }
          float* c = cacc + (pi - g0) * super_rows * 32;
          const uint8_t* a = reinterpret_cast<const uint8_t*>(
              call.x.x + size_t(ms) * size_t(call.x.stride) + size_t(kt0) * kTileK);
          for (int64_t blk = 0; blk < blocks; ++blk) {
            const uint8_t* ab = a + size_t(blk * 32) * size_t(a_stride);
            if (np == 2)
              tile_block_bf16_acc<2>(ab, a_stride, b, steps, c + blk * 32 * 32, kt0 == 0);
            else
              tile_block_bf16_acc<1>(ab, a_stride, b, steps, c + blk * 32 * 32, kt0 == 0);
          }
        }
      }
      for (int64_t pi = g0; pi < g1; ++pi) {
        const int64_t p = p0 + 2 * pi;
        const int np = p + 1 < p1 ? 2 : 1;
        const float* c = cacc + (pi - g0) * super_rows * 32;
        for (int64_t m = ms; m < std::min(me, call.M); ++m)
          for (int j = 0; j < np; ++j)
            store16(call.y, m, (p + j) * kPanel,
                    _mm512_add_ps(_mm512_load_ps(c + (m - ms) * 32 + 16 * j), load_bias(w, p + j)));
      }
    }
  }
}

}  // namespace

void a16_dequantized_amx(const A16Call& call, int64_t m0, int64_t m1, int64_t p0, int64_t p1) {
  call.w->planes == 1 ? a16_dequantized<1>(call, m0, m1, p0, p1)
                      : a16_dequantized<2>(call, m0, m1, p0, p1);
}

}  // namespace nibble::cpu_amx
