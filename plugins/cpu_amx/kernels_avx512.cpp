// AVX-512 streaming micro-kernels (BF16 + VNNI). They read every packed weight byte once per pass
// over up to MR rows, from NP panels at once (NP independent memory streams per thread), and
// unpack in registers: W4A16 turns nibbles into bf16 (128 + q) with one ternary-logic op and feeds
// VDPBF16PS; W4A8 splits nibbles into VNNI-4 bytes and feeds VPDPBUSD (weights unsigned,
// activations signed, so the integer sums are exact); on AMX machines W4A16 rows take their
// fixed-point high and low bytes through the same VPDPBUSD stream (a16_fixed_rows). Small M
// everywhere, all M without AMX.
// Built with -ffp-contract=off: the W4A8 epilogue multiplies and adds in the order of
// docs/formats.md#w4a8-numerics.
#include "avx512_common.hpp"

#include <stdexcept>

namespace nibble::cpu_amx {
namespace {

using namespace avx512;

// W4A16 streaming: per 64 bytes of a panel, three shifts and four ternary-logic ops give four bf16
// rows (128 + q) for VDPBF16PS.
template <int MR, int NP, int PL>
void a16_block(const A16Call& call, int64_t m0, int64_t p0) {
  const PackedLinear& w = *call.w;
  const size_t panel_bytes = w.panel_bytes();
  const uint8_t* base = w.tile(p0, 0);
  const uint16_t* x[MR];
  for (int m = 0; m < MR; ++m) x[m] = call.x.x + size_t(m0 + m) * size_t(call.x.stride);
  __m512 out[MR][NP];
  for (int j = 0; j < NP; ++j) {
    __m512 b = load_bias(w, p0 + j);
    for (int m = 0; m < MR; ++m) out[m][j] = b;
  }
  const float offset = a16_weight_offset(PL);
  for (size_t ci = 0; ci < w.a16_chunks.size(); ++ci) {
    const Chunk& ch = w.a16_chunks[ci];
    // VDPBF16PS takes several cycles before its result can feed the next one; one row of four
    // panels is only four dependency chains, so at M = 1 each gets two accumulators (even and
    // odd k-pairs), summed in the epilogue in a fixed order. On the AMX host (4096×14336, M = 1,
    // alternating processes) this took W4A16 from 60–64 % to 61–77 % of the read bandwidth.
    constexpr int CH = (MR == 1 && PL == 1) ? 2 : 1;
    __m512 acc[MR][NP][PL][CH];
    for (int m = 0; m < MR; ++m)
      for (int j = 0; j < NP; ++j)
        for (int l = 0; l < PL; ++l)
          for (int c = 0; c < CH; ++c) acc[m][j][l][c] = _mm512_setzero_ps();
    for (int32_t t = ch.tile0; t < ch.tile0 + ch.ntiles; ++t) {
      const uint8_t* tp = base + size_t(t) * PL * kTileBytes;
      prefetch_streams<NP>(base, panel_bytes, PL, t);
      for (int u = 0; u < 4; ++u) {
        __m512i v[NP][PL][4];
        for (int j = 0; j < NP; ++j)
          for (int l = 0; l < PL; ++l)
            nibbles_bf16_all(_mm512_loadu_si512(tp + j * panel_bytes + l * kTileBytes + u * 64),
                             &v[j][l][0], &v[j][l][1], &v[j][l][2], &v[j][l][3]);
        const int k = t * kTileK + 8 * u;
        for (int m = 0; m < MR; ++m)
          for (int s = 0; s < 4; ++s) {
            const __m512bh xb = (__m512bh)bcast32(x[m] + k + 2 * s);
            for (int j = 0; j < NP; ++j)
              for (int l = 0; l < PL; ++l)
                acc[m][j][l][s % CH] =
                    _mm512_dpbf16_ps(acc[m][j][l][s % CH], xb, (__m512bh)v[j][l][s]);
          }
      }
    }
    for (int j = 0; j < NP; ++j) {
      const __m512 s = load_scale(w, p0 + j, ch.group);
      const __m512 zt = _mm512_add_ps(_mm512_cvtepi32_ps(load_zero_i32(w, p0 + j, ch.group)),
                                      _mm512_set1_ps(offset));
      for (int m = 0; m < MR; ++m) {
        __m512 a = acc[m][j][0][0];
        if constexpr (CH == 2) a = _mm512_add_ps(a, acc[m][j][0][1]);
        if constexpr (PL == 2) a = _mm512_fmadd_ps(acc[m][j][1][0], _mm512_set1_ps(16.f), a);
        const __m512 xs = _mm512_set1_ps(call.x.sum[size_t(m0 + m) * size_t(call.x.chunks) + ci]);
        out[m][j] = _mm512_fmadd_ps(s, _mm512_fnmadd_ps(zt, xs, a), out[m][j]);
      }
    }
  }
  for (int m = 0; m < MR; ++m)
    for (int j = 0; j < NP; ++j) store16(call.y, m0 + m, (p0 + j) * kPanel, out[m][j]);
}

// The VNNI-4 byte vectors (lo, hi) of 64-byte chunk u of the k-tile at `tp` in each of NP panels
// (8-bit weights: both planes merged into bytes).
template <int NP, int PL>
inline void unpack_u8_chunk(const uint8_t* tp, size_t panel_bytes, int u, __m512i* lo,
                            __m512i* hi) {
  for (int j = 0; j < NP; ++j) {
    const uint8_t* c = tp + j * panel_bytes + u * 64;
    if constexpr (PL == 1)
      nibbles_u8(_mm512_loadu_si512(c), &lo[j], &hi[j]);
    else
      bytes_u8(_mm512_loadu_si512(c), _mm512_loadu_si512(c + kTileBytes), &lo[j], &hi[j]);
  }
}

// fn(k, lo, hi) for every 64-byte chunk of the k-tiles of `ch` in NP panels from `base`: k is its
// first input slot, lo and hi its byte vectors per panel; each k-tile's streams prefetched ahead.
template <int NP, int PL, class Fn>
inline void for_each_u8_chunk(const uint8_t* base, size_t panel_bytes, const Chunk& ch,
                              const Fn& fn) {
  for (int32_t t = ch.tile0; t < ch.tile0 + ch.ntiles; ++t) {
    const uint8_t* tp = base + size_t(t) * PL * kTileBytes;
    prefetch_streams<NP>(base, panel_bytes, PL, t);
    for (int u = 0; u < 4; ++u) {
      __m512i lo[NP], hi[NP];
      unpack_u8_chunk<NP, PL>(tp, panel_bytes, u, lo, hi);
      fn(t * kTileK + 8 * u, lo, hi);
    }
  }
}

template <int MR, int NP, int PL>
void a8_block(const A8Call& call, int64_t m0, int64_t p0) {
  const PackedLinear& w = *call.w;
  const size_t panel_bytes = w.panel_bytes();
  const uint8_t* base = w.tile(p0, 0);
  const int8_t* x[MR];
  for (int m = 0; m < MR; ++m) x[m] = call.x.q + size_t(m0 + m) * size_t(call.x.stride);
  __m512 out[MR][NP];
  for (int j = 0; j < NP; ++j) {
    __m512 b = load_bias(w, p0 + j);
    for (int m = 0; m < MR; ++m) out[m][j] = b;
  }
  for (size_t ci = 0; ci < w.a8_chunks.size(); ++ci) {
    const Chunk& ch = w.a8_chunks[ci];
    __m512i acc[MR][NP];
    for (int m = 0; m < MR; ++m)
      for (int j = 0; j < NP; ++j) acc[m][j] = _mm512_setzero_si512();
    for_each_u8_chunk<NP, PL>(base, panel_bytes, ch,
                              [&](int k, const __m512i* lo, const __m512i* hi) {
                                for (int m = 0; m < MR; ++m) {
                                  const __m512i xl = bcast32(x[m] + k), xh = bcast32(x[m] + k + 4);
                                  for (int j = 0; j < NP; ++j) {
                                    acc[m][j] = _mm512_dpbusd_epi32(acc[m][j], lo[j], xl);
                                    acc[m][j] = _mm512_dpbusd_epi32(acc[m][j], hi[j], xh);
                                  }
                                }
                              });
    for (int j = 0; j < NP; ++j) {
      const __m512 s = load_scale(w, p0 + j, ch.group);
      const __m512i z = load_zero_i32(w, p0 + j, ch.group);
      for (int m = 0; m < MR; ++m) {
        const __m512i qs =
            _mm512_set1_epi32(call.x.sum[size_t(m0 + m) * size_t(call.x.chunks) + ci]);
        const __m512i exact = _mm512_sub_epi32(acc[m][j], _mm512_mullo_epi32(z, qs));
        const __m512 t1 =
            _mm512_mul_ps(_mm512_cvtepi32_ps(exact), _mm512_set1_ps(call.x.scale[m0 + m]));
        const __m512 t2 = _mm512_mul_ps(t1, s);
        out[m][j] = _mm512_add_ps(out[m][j], t2);
      }
    }
  }
  for (int m = 0; m < MR; ++m)
    for (int j = 0; j < NP; ++j) store16(call.y, m0 + m, (p0 + j) * kPanel, out[m][j]);
}

// W4A16 on fixed-point activations (docs/formats.md#w4a16-fixed-point), MR rows: each row's high
// and low bytes are two int8 rows of W4A8's VPDPBUSD stream, so 64 bytes of a 4-bit panel cost the
// nibble split once for all rows and four VPDPBUSD per row instead of seven unpacking operations
// and four VDPBF16PS per row. Per a8 chunk the exact Σ v·(q − z) = 256·Σ h·q + Σ l·q − z·Σ v,
// then one FMA with the step and the scale: the arithmetic of the tile path's a16_fixed_pair, so
// both give the same bits.
template <int MR, int NP, int PL>
void a16_fixed_rows(const A16Call& call, int64_t m0, int64_t p0) {
  const PackedLinear& w = *call.w;
  const A16FixedActivations& x = call.fixed;
  const size_t panel_bytes = w.panel_bytes();
  const uint8_t* base = w.tile(p0, 0);
  const int8_t* xh[MR];
  const int8_t* xl[MR];
  for (int m = 0; m < MR; ++m) {
    xh[m] = x.q + size_t(2 * (m0 + m)) * size_t(x.stride);
    xl[m] = xh[m] + x.stride;
  }
  __m512 out[MR][NP];
  for (int j = 0; j < NP; ++j) {
    const __m512 b = load_bias(w, p0 + j);
    for (int m = 0; m < MR; ++m) out[m][j] = b;
  }
  for (size_t ci = 0; ci < w.a8_chunks.size(); ++ci) {
    const Chunk& ch = w.a8_chunks[ci];
    __m512i ah[MR][NP], al[MR][NP];
    for (int m = 0; m < MR; ++m)
      for (int j = 0; j < NP; ++j) ah[m][j] = al[m][j] = _mm512_setzero_si512();
    for_each_u8_chunk<NP, PL>(
        base, panel_bytes, ch, [&](int k, const __m512i* lo, const __m512i* hi) {
          for (int m = 0; m < MR; ++m) {
            const __m512i h0 = bcast32(xh[m] + k), h1 = bcast32(xh[m] + k + 4);
            const __m512i l0 = bcast32(xl[m] + k), l1 = bcast32(xl[m] + k + 4);
            for (int j = 0; j < NP; ++j) {
              ah[m][j] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(ah[m][j], lo[j], h0), hi[j], h1);
              al[m][j] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(al[m][j], lo[j], l0), hi[j], l1);
            }
          }
        });
    for (int j = 0; j < NP; ++j) {
      const __m512i z = load_zero_i32(w, p0 + j, ch.group);
      const __m512 s = load_scale(w, p0 + j, ch.group);
      for (int m = 0; m < MR; ++m) {
        const size_t at = size_t(m0 + m) * size_t(x.chunks) + ci;
        const __m512i exact =
            _mm512_sub_epi32(_mm512_add_epi32(_mm512_slli_epi32(ah[m][j], 8), al[m][j]),
                             _mm512_mullo_epi32(z, _mm512_set1_epi32(x.sum[at])));
        const __m512 t = _mm512_mul_ps(_mm512_cvtepi32_ps(exact), _mm512_set1_ps(x.step[at]));
        out[m][j] = _mm512_fmadd_ps(t, s, out[m][j]);
      }
    }
  }
  for (int m = 0; m < MR; ++m)
    for (int j = 0; j < NP; ++j) store16(call.y, m0 + m, (p0 + j) * kPanel, out[m][j]);
}

template <int MR, int NP, int PL>
struct A16FixedBlock {
  static void run(const A16Call& c, int64_t m, int64_t p) { a16_fixed_rows<MR, NP, PL>(c, m, p); }
};

// Run the instantiation for (rows, panels, planes); one per shape a pass can take.
template <class Call, template <int, int, int> class Block, int MR, int NP, int PL>
bool block_if(int mr, int np, int pl, const Call& c, int64_t m, int64_t p) {
  if (mr != MR || np != NP || pl != PL) return false;
  Block<MR, NP, PL>::run(c, m, p);
  return true;
}

template <class Call, template <int, int, int> class Block>
void run_block(int mr, int np, int pl, const Call& c, int64_t m, int64_t p) {
  const bool done = block_if<Call, Block, 1, 4, 1>(mr, np, pl, c, m, p) ||
                    block_if<Call, Block, 1, 2, 1>(mr, np, pl, c, m, p) ||
                    block_if<Call, Block, 1, 1, 1>(mr, np, pl, c, m, p) ||
                    block_if<Call, Block, 2, 2, 1>(mr, np, pl, c, m, p) ||
                    block_if<Call, Block, 2, 1, 1>(mr, np, pl, c, m, p) ||
                    block_if<Call, Block, 3, 2, 1>(mr, np, pl, c, m, p) ||
                    block_if<Call, Block, 3, 1, 1>(mr, np, pl, c, m, p) ||
                    block_if<Call, Block, 4, 2, 1>(mr, np, pl, c, m, p) ||
                    block_if<Call, Block, 4, 1, 1>(mr, np, pl, c, m, p) ||
                    block_if<Call, Block, 1, 4, 2>(mr, np, pl, c, m, p) ||
                    block_if<Call, Block, 1, 2, 2>(mr, np, pl, c, m, p) ||
                    block_if<Call, Block, 1, 1, 2>(mr, np, pl, c, m, p) ||
                    block_if<Call, Block, 2, 2, 2>(mr, np, pl, c, m, p) ||
                    block_if<Call, Block, 2, 1, 2>(mr, np, pl, c, m, p);
  if (!done) throw std::logic_error("cpu_amx: no AVX-512 block for this shape");
}

// Walk rows [m0, m1) × panels [p0, p1): panel groups outermost so a group's weights (NP × K/2
// bytes) stay in L2 while further row blocks reuse them.
template <class Call, template <int, int, int> class Block>
void walk(const Call& call, int64_t m0, int64_t m1, int64_t p0, int64_t p1) {
  const int PL = call.w->planes;
  // Rows per pass that keep accumulators and unpacked weights within the 32 vector registers.
  const int mr_max = PL == 2 ? 2 : Call::kRowsPerPass;
  int64_t p = p0;
  while (p < p1) {
    const int64_t left_p = p1 - p;
    const int np = left_p >= 4 && (m1 - m0) == 1 ? 4 : left_p >= 2 ? 2 : 1;
    for (int64_t m = m0; m < m1;) {
      const int mr = int(std::min<int64_t>(mr_max, m1 - m));
      run_block<Call, Block>(mr, np, PL, call, m, p);
      m += mr;
    }
    p += np;
  }
}

template <int MR, int NP, int PL>
struct A16Block {
  static void run(const A16Call& c, int64_t m, int64_t p) { a16_block<MR, NP, PL>(c, m, p); }
};
template <int MR, int NP, int PL>
struct A8Block {
  static void run(const A8Call& c, int64_t m, int64_t p) { a8_block<MR, NP, PL>(c, m, p); }
};

}  // namespace

void a16_avx512(const A16Call& call, int64_t m0, int64_t m1, int64_t p0, int64_t p1) {
  if (call.fixed_point)
    walk<A16Call, A16FixedBlock>(call, m0, m1, p0, p1);
  else
    walk<A16Call, A16Block>(call, m0, m1, p0, p1);
}

void a8_avx512(const A8Call& call, int64_t m0, int64_t m1, int64_t p0, int64_t p1) {
  walk<A8Call, A8Block>(call, m0, m1, p0, p1);
}

}  // namespace nibble::cpu_amx
