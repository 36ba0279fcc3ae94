// AMX tile micro-kernels for large M. Each thread takes a slice of panel pairs (32 columns) and
// row blocks of 32: per chunk it unpacks the pair's weights once into an L1/L2 buffer laid out as
// B tiles, then runs every 32-row block of its slice through 2×2 tiles (C 16×16 fp32/int32).
//  - W4A16: B rows are bf16 (128 + q) from one ternary-logic op per 16 values, TDPBF16PS, and a
//    per-group fp32 epilogue: out += s · (C − (128 + z)·Σx). Above the dispatcher's crossover
//    (A16Call::dequantize_b) B is instead dequantized once per K block to bf16 (q − z)·s and
//    reused for up to 512 rows of A, with no epilogue (kernels_amx_dequant.cpp). At the
//    dispatcher's small M (A16Call::fixed_point) W4A16 runs on W4A8's int8 pipeline instead, with
//    two A rows (high and low byte) per fixed-point activation row (a16_fixed_pair).
//  - W4A8: A holds the signed int8 activations. 4-bit B rows are q − z (signed, −16..15) and
//    TDPBSSD gives the exact Σ qa·(q − z); 8-bit B rows are q (unsigned) and TDPBSUD gives Σ qa·q,
//    corrected by z·Σqa. Then the W4A8 epilogue in its defined order
//    (docs/formats.md#w4a8-numerics). Built with -ffp-contract=off.
// The tile configuration and its scope: amx_tiles.hpp.
#include "amx_tiles.hpp"

#include <stdexcept>

namespace nibble::cpu_amx {
namespace {

using namespace avx512;
using namespace amx_tiles;

// bf16 B tiles of one plane of one (panel, k-tile): 16 k-pair rows × 16 columns.
void unpack_bf16_tile(const uint8_t* src, uint8_t* dst) {
  for (int u = 0; u < 4; ++u) {
    __m512i n0, n1, n2, n3;
    nibbles_bf16_all(_mm512_loadu_si512(src + u * 64), &n0, &n1, &n2, &n3);
    _mm512_store_si512(dst + (4 * u + 0) * 64, n0);
    _mm512_store_si512(dst + (4 * u + 1) * 64, n1);
    _mm512_store_si512(dst + (4 * u + 2) * 64, n2);
    _mm512_store_si512(dst + (4 * u + 3) * 64, n3);
  }
}

// Half an int8 B tile (8 VNNI-4 rows, 32 slots) of one (panel, k-tile), planes merged to bytes.
void unpack_u8_half(const uint8_t* src, int planes, uint8_t* dst) {
  for (int u = 0; u < 4; ++u) {
    __m512i lo, hi;
    if (planes == 1)
      nibbles_u8(_mm512_loadu_si512(src + u * 64), &lo, &hi);
    else
      bytes_u8(_mm512_loadu_si512(src + u * 64), _mm512_loadu_si512(src + kTileBytes + u * 64), &lo,
               &hi);
    _mm512_store_si512(dst + (2 * u) * 64, lo);
    _mm512_store_si512(dst + (2 * u + 1) * 64, hi);
  }
}

// The same for a 4-bit plane as signed q − z (−16..15): the zero point leaves the epilogue.
// zpat holds each column's zero point in all 4 bytes of its dword.
void unpack_s8_half(const uint8_t* src, __m512i zpat, uint8_t* dst) {
  for (int u = 0; u < 4; ++u) {
    __m512i lo, hi;
    nibbles_u8(_mm512_loadu_si512(src + u * 64), &lo, &hi);
    _mm512_store_si512(dst + (2 * u) * 64, _mm512_sub_epi8(lo, zpat));
    _mm512_store_si512(dst + (2 * u + 1) * 64, _mm512_sub_epi8(hi, zpat));
  }
}

struct NoWork {
  void operator()(int) const {}
};

// The part of n items that step i of `steps` takes: an equal share each, the rest at the last
// (with fewer items than steps, the first n steps take one each).
inline void step_share(int32_t n, int steps, int i, int32_t* first, int32_t* end) {
  const int32_t per = std::max<int32_t>(1, n / steps);
  *first = std::min(n, i * per);
  *end = i == steps - 1 ? n : std::min(n, (i + 1) * per);
}

// Run the 2×2 (or 2×1) tile product of one row block over `steps` B tiles per panel; C stored to
// c[32][32] (row stride 128 bytes). work(i) runs after step i's products are issued, so vector
// work placed there overlaps the tile unit; the same work before or after the whole block was
// measured to add most of its time to the block's (docs/cpu_amx.md, Kernels). The tile
// intrinsics need literal tile numbers, hence the macro over the instruction.
#define NIBBLE_TILE_BLOCK(NAME, DP)                                                   \
  template <int NP, int MB, class Work = NoWork>                                      \
  void NAME(const uint8_t* a, int64_t a_stride, const uint8_t* b, int steps, void* c, \
            Work work = {}) {                                                         \
    _tile_zero(0);                                                                    \
    _tile_zero(1);                                                                    \
    if constexpr (MB == 2) {                                                          \
      _tile_zero(2);                                                                  \
      _tile_zero(3);                                                                  \
    }                                                                                 \
    for (int i = 0; i < steps; ++i) {                                                 \
      _tile_loadd(4, a + i * 64, a_stride);                                           \
      if constexpr (MB == 2) _tile_loadd(5, a + i * 64 + 16 * a_stride, a_stride);    \
      _tile_loadd(6, b + size_t(i * NP) * kBTile, 64);                                \
      DP(0, 4, 6);                                                                    \
      if constexpr (MB == 2) DP(2, 5, 6);                                             \
      if constexpr (NP == 2) {                                                        \
        _tile_loadd(7, b + size_t(i * NP + 1) * kBTile, 64);                          \
        DP(1, 4, 7);                                                                  \
        if constexpr (MB == 2) DP(3, 5, 7);                                           \
      }                                                                               \
      work(i);                                                                        \
    }                                                                                 \
    char* cc = static_cast<char*>(c);                                                 \
    _tile_stored(0, cc, 128);                                                         \
    if constexpr (MB == 2) _tile_stored(2, cc + 16 * 128, 128);                       \
    if constexpr (NP == 2) {                                                          \
      _tile_stored(1, cc + 64, 128);                                                  \
      if constexpr (MB == 2) _tile_stored(3, cc + 16 * 128 + 64, 128);                \
    }                                                                                 \
  }
NIBBLE_TILE_BLOCK(tile_block_bf16, _tile_dpbf16ps)
NIBBLE_TILE_BLOCK(tile_block_int8, _tile_dpbsud)
NIBBLE_TILE_BLOCK(tile_block_int8_signed, _tile_dpbssd)
#undef NIBBLE_TILE_BLOCK

// Every staged row of panels p .. p+NP-1 starts at the bias (0 without one).
template <int NP>
void start_with_bias(const PackedLinear& w, int64_t p, int64_t rows, float* out) {
  for (int64_t r = 0; r < rows; ++r)
    for (int j = 0; j < NP; ++j) _mm512_store_ps(out + r * 32 + 16 * j, load_bias(w, p + j));
}

// Output rows [m0, m1) of panels p .. p+NP-1 accumulate in `out` (32 floats per row, from the
// bias) and are stored to y at the end.
template <int NP>
float* start_rows(const PackedLinear& w, int64_t p, int64_t rows, std::vector<uint8_t>& omem) {
  float* out = aligned_scratch<float>(omem, size_t(rows) * 32 * 4);
  start_with_bias<NP>(w, p, rows, out);
  return out;
}
template <int NP>
void store_rows(const OutputView& y, int64_t m0, int64_t m1, int64_t p, const float* out) {
  for (int64_t m = m0; m < m1; ++m)
    for (int j = 0; j < NP; ++j)
      store16(y, m, (p + j) * kPanel, _mm512_load_ps(out + (m - m0) * 32 + 16 * j));
}

// The tile work of a pair runs as a sequence of steps, one per (chunk, row block) in that order.
// A step issues its tile products with the unpacking of the next chunk's B tiles (into the other
// half of a double buffer) placed a share at a time between them, in one block of the chunk
// (W4A16: the first, W4A8: the last), then runs the epilogue of the step before (its C tiles are
// done by then). So the vector work overlaps the tile unit at any M, including the single row
// block of M ≤ 16. A step's C tiles are staged in cbuf[step parity]; the epilogue reads what the
// previous step stored, and the step after next overwrites it only after that epilogue in
// program order.

template <int NP, int MB>
void a16_pair(const A16Call& call, int64_t m0, int64_t m1, int64_t p, std::vector<uint8_t>& bmem,
              std::vector<uint8_t>& omem) {
  const PackedLinear& w = *call.w;
  const int PL = w.planes;
  const int64_t rows = m1 - m0;
  constexpr int64_t kBlockRows = 16 * MB;
  const int64_t blocks = (rows + kBlockRows - 1) / kBlockRows;
  const size_t chunks = w.a16_chunks.size();
  if (blocks == 0) return;
  float* out = start_rows<NP>(w, p, blocks * kBlockRows, omem);
  alignas(64) float cbuf[2][2][32 * 32];  // [step parity][plane]
  const float offset = a16_weight_offset(PL);
  const int64_t a_stride = call.x.stride * 2;
  // B tiles of two chunks, [chunk parity][plane][tile][panel][1 KB], and their scales and zeros.
  int32_t most_tiles = 0;
  for (const Chunk& ch : w.a16_chunks) most_tiles = std::max(most_tiles, ch.ntiles);
  const size_t plane_bytes = size_t(most_tiles) * NP * kBTile;
  uint8_t* bufs = aligned_scratch<uint8_t>(bmem, 2 * plane_bytes * size_t(PL));
  auto b_of = [&](size_t ci) { return bufs + (ci & 1) * plane_bytes * size_t(PL); };
  // Plane l's k-tiles [t0, t1) of chunk ci.
  auto unpack_tiles = [&](size_t ci, int l, int32_t t0, int32_t t1) {
    const Chunk& ch = w.a16_chunks[ci];
    uint8_t* b = b_of(ci) + l * plane_bytes;
    for (int32_t t = t0; t < t1; ++t) {
      if (l == 0) prefetch_streams<NP>(w.tile(p, 0), w.panel_bytes(), PL, ch.tile0 + t);
      for (int j = 0; j < NP; ++j)
        unpack_bf16_tile(w.tile(p + j, ch.tile0 + t) + l * kTileBytes,
                         b + size_t(t * NP + j) * kBTile);
    }
  };
  auto epilogue = [&](size_t ci, int64_t blk, int slot) {
    const int64_t mb = m0 + blk * kBlockRows;
    const float* c0 = cbuf[slot][0];
    const float* c1 = cbuf[slot][1];
    const int32_t group = w.a16_chunks[ci].group;
    __m512 sc[NP], zc[NP];
    for (int j = 0; j < NP; ++j) {
      sc[j] = load_scale(w, p + j, group);
      zc[j] =
          _mm512_add_ps(_mm512_cvtepi32_ps(load_zero_i32(w, p + j, group)), _mm512_set1_ps(offset));
    }
    const int64_t live = std::min<int64_t>(kBlockRows, call.M - mb);
    for (int64_t r = 0; r < live; ++r) {
      const __m512 xs = _mm512_set1_ps(call.x.sum[size_t(mb + r) * size_t(call.x.chunks) + ci]);
      float* o = out + (blk * kBlockRows + r) * 32;
      for (int j = 0; j < NP; ++j) {
        __m512 c = _mm512_load_ps(c0 + r * 32 + 16 * j);
        if (PL == 2)
          c = _mm512_fmadd_ps(_mm512_load_ps(c1 + r * 32 + 16 * j), _mm512_set1_ps(16.f), c);
        const __m512 v =
            _mm512_fmadd_ps(sc[j], _mm512_fnmadd_ps(zc[j], xs, c), _mm512_load_ps(o + 16 * j));
        _mm512_store_ps(o + 16 * j, v);
      }
    }
  };
  if (chunks > 0)
    for (int l = 0; l < PL; ++l) unpack_tiles(0, l, 0, w.a16_chunks[0].ntiles);
  size_t step = 0, last_ci = 0;
  int64_t last_blk = 0;
  for (size_t ci = 0; ci < chunks; ++ci) {
    const Chunk& ch = w.a16_chunks[ci];
    const uint8_t* b = b_of(ci);
    for (int64_t blk = 0; blk < blocks; ++blk, ++step) {
      const int64_t mb = m0 + blk * kBlockRows;
      const uint8_t* a = reinterpret_cast<const uint8_t*>(
          call.x.x + size_t(mb) * size_t(call.x.stride) + size_t(ch.tile0) * kTileK);
      // The next chunk's B tiles are unpacked between this chunk's first block's products (this
      // chunk's were stored a whole block earlier, so their tile loads need not wait for the
      // stores to reach L1).
      const bool next = blk == 0 && ci + 1 < chunks;
      for (int l = 0; l < PL; ++l) {
        const uint8_t* bl = b + l * plane_bytes;
        if (next)
          tile_block_bf16<NP, MB>(a, a_stride, bl, ch.ntiles, cbuf[step & 1][l], [&](int i) {
            int32_t t0, t1;
            step_share(w.a16_chunks[ci + 1].ntiles, ch.ntiles, i, &t0, &t1);
            unpack_tiles(ci + 1, l, t0, t1);
          });
        else
          tile_block_bf16<NP, MB>(a, a_stride, bl, ch.ntiles, cbuf[step & 1][l]);
      }
      if (step > 0) epilogue(last_ci, last_blk, int((step - 1) & 1));
      last_ci = ci;
      last_blk = blk;
    }
  }
  if (step > 0) epilogue(last_ci, last_blk, int((step - 1) & 1));
  store_rows<NP>(call.y, m0, std::min(m1, call.M), p, out);
}

// The int8 tile pipeline of panels p .. p+NP-1 over the weight's a8 chunks, for `blocks` blocks
// of 16·MB A rows from a0 (a_stride bytes apart): per step (chunk, block) the block's products
// into int32 C tiles, then epilogue(ci, blk, c, s, z) on the previous step's C (c[32][32], row
// stride 32) with its chunk's scales and zeros. 4-bit: B = q − z (signed), TDPBSSD, no
// correction. 8-bit: B = q (unsigned), TDPBSUD, the epilogue subtracts the zero-point term.
template <int NP, int MB, class Epilogue>
void int8_pipeline(const PackedLinear& w, int64_t p, const int8_t* a0, int64_t a_stride,
                   int64_t blocks, std::vector<uint8_t>& bmem, const Epilogue& epilogue) {
  constexpr int64_t kBlockRows = 16 * MB;
  const size_t chunks = w.a8_chunks.size();
  alignas(64) int32_t cbuf[2][32 * 32];  // [step parity]
  const bool is_signed = w.planes == 1;
  // B tiles hold two k-tiles (K = 64); an odd last k-tile leaves its second half zero, so the
  // A tile's overhang into the next chunk multiplies zeros. Two chunks' worth, by chunk parity.
  int32_t most_steps = 0;
  for (const Chunk& ch : w.a8_chunks) most_steps = std::max(most_steps, (ch.ntiles + 1) / 2);
  const size_t chunk_bytes = size_t(most_steps) * NP * kBTile;
  uint8_t* bufs = aligned_scratch<uint8_t>(bmem, 2 * chunk_bytes);
  auto b_of = [&](size_t ci) { return bufs + (ci & 1) * chunk_bytes; };
  // Scales and zeros by chunk modulo 3: the next chunk's are loaded while the epilogue of the
  // chunk before this one may still be ahead in program order.
  __m512 s[3][NP];
  __m512i z[3][NP];
  auto start_chunk = [&](size_t ci) {
    const Chunk& ch = w.a8_chunks[ci];
    if (ch.ntiles % 2) std::memset(b_of(ci), 0, size_t((ch.ntiles + 1) / 2 * NP) * kBTile);
    for (int j = 0; j < NP; ++j) {
      s[ci % 3][j] = load_scale(w, p + j, ch.group);
      z[ci % 3][j] = load_zero_i32(w, p + j, ch.group);
    }
  };
  // k-tiles [t0, t1) of chunk ci (after start_chunk(ci)).
  auto unpack_tiles = [&](size_t ci, int32_t t0, int32_t t1) {
    const Chunk& ch = w.a8_chunks[ci];
    uint8_t* b = b_of(ci);
    for (int32_t t = t0; t < t1; ++t) {
      prefetch_streams<NP>(w.tile(p, 0), w.panel_bytes(), w.planes, ch.tile0 + t);
      for (int j = 0; j < NP; ++j) {
        uint8_t* dst = b + size_t((t / 2) * NP + j) * kBTile + (t % 2) * 512;
        if (is_signed)
          unpack_s8_half(w.tile(p + j, ch.tile0 + t),
                         _mm512_mullo_epi32(z[ci % 3][j], _mm512_set1_epi32(0x01010101)), dst);
        else
          unpack_u8_half(w.tile(p + j, ch.tile0 + t), w.planes, dst);
      }
    }
  };
  auto finish = [&](size_t ci, int64_t blk, int slot) {
    epilogue(ci, blk, static_cast<const int32_t*>(cbuf[slot]), s[ci % 3], z[ci % 3]);
  };
  if (chunks > 0) {
    start_chunk(0);
    unpack_tiles(0, 0, w.a8_chunks[0].ntiles);
  }
  size_t step = 0, last_ci = 0;
  int64_t last_blk = 0;
  for (size_t ci = 0; ci < chunks; ++ci) {
    const Chunk& ch = w.a8_chunks[ci];
    const int steps = (ch.ntiles + 1) / 2;
    const uint8_t* b = b_of(ci);
    for (int64_t blk = 0; blk < blocks; ++blk, ++step) {
      const uint8_t* a = reinterpret_cast<const uint8_t*>(
          a0 + size_t(blk * kBlockRows) * size_t(a_stride) + size_t(ch.tile0) * kTileK);
      // The next chunk's B tiles are unpacked between the last block's products (as in
      // a16_pair), into the buffer of the chunk before, whose tile loads are all issued.
      const bool next = blk == blocks - 1 && ci + 1 < chunks;
      if (next) start_chunk(ci + 1);
      auto unpack_next = [&](int i) {
        int32_t t0, t1;
        step_share(w.a8_chunks[ci + 1].ntiles, steps, i, &t0, &t1);
        unpack_tiles(ci + 1, t0, t1);
      };
      if (is_signed)
        next ? tile_block_int8_signed<NP, MB>(a, a_stride, b, steps, cbuf[step & 1], unpack_next)
             : tile_block_int8_signed<NP, MB>(a, a_stride, b, steps, cbuf[step & 1]);
      else
        next ? tile_block_int8<NP, MB>(a, a_stride, b, steps, cbuf[step & 1], unpack_next)
             : tile_block_int8<NP, MB>(a, a_stride, b, steps, cbuf[step & 1]);
      if (step > 0) finish(last_ci, last_blk, int((step - 1) & 1));
      last_ci = ci;
      last_blk = blk;
    }
  }
  if (step > 0) finish(last_ci, last_blk, int((step - 1) & 1));
}

template <int NP, int MB>
void a8_pair(const A8Call& call, int64_t m0, int64_t m1, int64_t p, std::vector<uint8_t>& bmem,
             std::vector<uint8_t>& omem) {
  const PackedLinear& w = *call.w;
  constexpr int64_t kBlockRows = 16 * MB;
  const int64_t blocks = (m1 - m0 + kBlockRows - 1) / kBlockRows;
  if (blocks == 0) return;
  float* out = start_rows<NP>(w, p, blocks * kBlockRows, omem);
  const bool is_signed = w.planes == 1;
  auto epilogue = [&](size_t ci, int64_t blk, const int32_t* c, const __m512* sc,
                      const __m512i* zc) {
    const int64_t mb = m0 + blk * kBlockRows;
    const int64_t live = std::min<int64_t>(kBlockRows, call.M - mb);
    for (int64_t r = 0; r < live; ++r) {
      const __m512i qs = _mm512_set1_epi32(call.x.sum[size_t(mb + r) * size_t(call.x.chunks) + ci]);
      const __m512 sa = _mm512_set1_ps(call.x.scale[mb + r]);
      float* o = out + (blk * kBlockRows + r) * 32;
      for (int j = 0; j < NP; ++j) {
        __m512i exact = _mm512_load_si512(c + r * 32 + 16 * j);
        if (!is_signed) exact = _mm512_sub_epi32(exact, _mm512_mullo_epi32(zc[j], qs));
        const __m512 t1 = _mm512_mul_ps(_mm512_cvtepi32_ps(exact), sa);
        const __m512 t2 = _mm512_mul_ps(t1, sc[j]);
        _mm512_store_ps(o + 16 * j, _mm512_add_ps(_mm512_load_ps(o + 16 * j), t2));
      }
    }
  };
  int8_pipeline<NP, MB>(w, p, call.x.q + size_t(m0) * size_t(call.x.stride), call.x.stride, blocks,
                        bmem, epilogue);
  store_rows<NP>(call.y, m0, std::min(m1, call.M), p, out);
}

// W4A16 at small M on the int8 pipeline: activation row m is tile rows 2m (high byte) and 2m + 1
// (low byte) of the A tiles (rows 0-7 the first, 8-15 the second), so C holds Σ h·b and Σ l·b
// and the row's exact Σ v·b is 256·C[2m] + C[2m+1] (|Σ v·b| < 2^31 for chunks of up to 128
// inputs); the epilogue adds s · (that · step). As many tile products as the bf16 path for the
// same rows and K, at half its B-tile bytes (one byte a weight stored beside the tiles, not two).
template <int NP, int MB>
void a16_fixed_pair(const A16Call& call, int64_t m0, int64_t m1, int64_t p,
                    std::vector<uint8_t>& bmem, std::vector<uint8_t>& omem) {
  const PackedLinear& w = *call.w;
  const A16FixedActivations& x = call.fixed;
  const int64_t rows = m1 - m0;
  float* out = start_rows<NP>(w, p, rows, omem);
  const bool is_signed = w.planes == 1;
  auto epilogue = [&](size_t ci, int64_t, const int32_t* c, const __m512* sc, const __m512i* zc) {
    for (int64_t r = 0; r < rows; ++r) {
      const size_t at = size_t(m0 + r) * size_t(x.chunks) + ci;
      const __m512 step = _mm512_set1_ps(x.step[at]);
      const __m512i vs = _mm512_set1_epi32(x.sum[at]);
      float* o = out + r * 32;
      for (int j = 0; j < NP; ++j) {
        __m512i exact =
            _mm512_add_epi32(_mm512_slli_epi32(_mm512_load_si512(c + 2 * r * 32 + 16 * j), 8),
                             _mm512_load_si512(c + (2 * r + 1) * 32 + 16 * j));
        if (!is_signed) exact = _mm512_sub_epi32(exact, _mm512_mullo_epi32(zc[j], vs));
        const __m512 t = _mm512_mul_ps(_mm512_cvtepi32_ps(exact), step);
        _mm512_store_ps(o + 16 * j, _mm512_fmadd_ps(t, sc[j], _mm512_load_ps(o + 16 * j)));
      }
    }
  };
  int8_pipeline<NP, MB>(w, p, x.q + size_t(2 * m0) * size_t(x.stride), x.stride, 1, bmem, epilogue);
  store_rows<NP>(call.y, m0, m1, p, out);
}

// Rows [m0, m1) in equal superblocks whose activations (row_bytes each) fit in about half of L2, so
// every panel pair of the slice reads them from L2, not L3; each pair's weights are unpacked
// once per superblock. Within a superblock, blocks of 32 rows (two A tiles), or one block of up
// to 16 with tiles of that many rows when the slice is that small.
template <class Call, class Pair2x2, class Pair2x1, class Pair1x2, class Pair1x1>
void walk_pairs(const Call& call, int64_t row_bytes, int64_t m0, int64_t m1, int64_t p0, int64_t p1,
                Pair2x2 p22, Pair2x1 p21, Pair1x2 p12, Pair1x1 p11) {
  const int64_t rows = m1 - m0;
  if (rows <= 0) return;
  const bool one_tile = rows <= 16;
  TileScope tiles(one_tile ? int(rows) : 16);
  thread_local std::vector<uint8_t> bmem, omem;  // kept: a warm forward allocates nothing
  constexpr int64_t kActivationBudget = int64_t(1) << 20;
  const int64_t most =
      std::max<int64_t>(32, kActivationBudget / std::max<int64_t>(1, row_bytes) / 32 * 32);
  // Superblocks of equal size: 256 rows of K = 4096 int8 activations are 2 × 128, not 224 + 32
  // (a superblock of one row block unpacks every weight for 32 rows).
  const int64_t supers = (rows + most - 1) / most;
  const int64_t super = (rows + supers * 32 - 1) / (supers * 32) * 32;
  for (int64_t ms = m0; ms < m1; ms += super) {
    const int64_t me = std::min(m1, ms + super);
    for (int64_t p = p0; p < p1; p += 2) {
      const bool two = p + 1 < p1;
      if (one_tile)
        two ? p12(call, ms, me, p, bmem, omem) : p11(call, ms, me, p, bmem, omem);
      else
        two ? p22(call, ms, me, p, bmem, omem) : p21(call, ms, me, p, bmem, omem);
    }
  }
}

}  // namespace

void a16_amx(const A16Call& call, int64_t m0, int64_t m1, int64_t p0, int64_t p1) {
  if (call.fixed_point) {  // two tile rows per activation row: one A tile per 8 rows, at most 16
    const int64_t rows = m1 - m0;
    if (rows <= 0) return;
    if (rows > kFixedTileRows)
      throw std::logic_error("cpu_amx: more fixed-point rows in one slice than two A tiles hold");
    const bool two = rows > 8;
    TileScope tiles(two ? 16 : int(2 * rows), two ? int(2 * (rows - 8)) : 0);  // tile 5 unused
    thread_local std::vector<uint8_t> bmem, omem;
    for (int64_t p = p0; p < p1; p += 2) {
      const bool pair = p + 1 < p1;
      if (two)
        pair ? a16_fixed_pair<2, 2>(call, m0, m1, p, bmem, omem)
             : a16_fixed_pair<1, 2>(call, m0, m1, p, bmem, omem);
      else
        pair ? a16_fixed_pair<2, 1>(call, m0, m1, p, bmem, omem)
             : a16_fixed_pair<1, 1>(call, m0, m1, p, bmem, omem);
    }
    return;
  }
  if (call.dequantize_b && m1 - m0 > 16) {
    a16_dequantized_amx(call, m0, m1, p0, p1);
    return;
  }
  walk_pairs(call, call.x.stride * 2, m0, m1, p0, p1, a16_pair<2, 2>, a16_pair<1, 2>,
             a16_pair<2, 1>, a16_pair<1, 1>);
}

void a8_amx(const A8Call& call, int64_t m0, int64_t m1, int64_t p0, int64_t p1) {
  walk_pairs(call, call.x.stride, m0, m1, p0, p1, a8_pair<2, 2>, a8_pair<1, 2>, a8_pair<2, 1>,
             a8_pair<1, 1>);
}

}  // namespace nibble::cpu_amx
