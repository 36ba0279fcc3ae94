// The contract between the dispatcher (linear_kernels.cpp) and the per-ISA micro-kernel files:
// prepared activations in the workspace, the packed weight, the output view, and one function per
// (mode, ISA) that computes rows [m0, m1) × panels [p0, p1). Plain data only, so the ISA files
// share nothing compiled with other flags.
#pragma once

#include "packed_weight.hpp"

#include <dlpack/dlpack.h>

#include <nibble/sdk/numeric.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace nibble::cpu_amx {

/// w4a16 activations: bf16 in the weight's slot order (sorted by group, zero padded), and
/// per (row, a16 chunk) the fp32 sum of those bf16 values (the zero-point term needs it).
struct A16Activations {
  const uint16_t* x = nullptr;  ///< [rows_padded][stride] bf16 bits; rows ≥ M are zero
  int64_t stride = 0;           ///< elements per row (≥ Kp)
  const float* sum = nullptr;   ///< [M][chunks]
  int64_t chunks = 0;
};

/// w4a8 activations (step 1 of docs/formats.md#w4a8-numerics): int8 per slot, each 8 slots
/// stored in the order 0,4,1,5,2,6,3,7 (matching how a 64-byte weight chunk splits into VNNI-4
/// low/high nibbles), the per-row scale sa, and per (row, a8 chunk) the sum of the int8 values.
struct A8Activations {
  const int8_t* q = nullptr;     ///< [rows_padded][stride]; rows ≥ M and padding are zero
  int64_t stride = 0;            ///< bytes per row (≥ Kp + 64: a K=64 tile may overhang)
  const float* scale = nullptr;  ///< [M] sa
  const int32_t* sum = nullptr;  ///< [M][chunks]
  int64_t chunks = 0;
};

/// w4a16 activations as 15-bit fixed point for the int8 tile path at small M: per (row, a8 chunk)
/// a power of two `step` so that each value is v·step with v an integer, |v| ≤ 2^14, and v in two
/// int8 tile rows, high byte h = (v + 128) >> 8 (|h| ≤ 64) then low byte v − 256·h, each in the
/// slot order of A8Activations. docs/formats.md#w4a16-fixed-point defines it.
struct A16FixedActivations {
  const int8_t* q = nullptr;     ///< [2·M][stride]: row 2m the high bytes of row m, 2m + 1 the low
  int64_t stride = 0;            ///< bytes per row (≥ Kp + 64, as A8Activations)
  const float* step = nullptr;   ///< [M][chunks] 2^-shift, NaN where the chunk is not finite
  const int32_t* sum = nullptr;  ///< [M][chunks] Σ v (the 8-bit zero-point term needs it)
  int64_t chunks = 0;
};

/// Where results go: y[m][n] for n < N, in y's dtype (f32, f16 or bf16). `data` holds element
/// (row0, col0), so a caller may point a block of rows and columns at a small scratch buffer.
struct OutputView {
  char* data = nullptr;
  int64_t stride = 0;  ///< elements per row
  DLDataType dtype{};
  int64_t N = 0;
  int64_t row0 = 0, col0 = 0;
  /// Element offset of (m, n) from data.
  size_t offset(int64_t m, int64_t n) const { return size_t((m - row0) * stride + (n - col0)); }
};

struct A16Call {
  static constexpr int kRowsPerPass = 4;  ///< AVX-512 streaming kernel's row block
  const PackedLinear* w = nullptr;
  A16Activations x;
  OutputView y;
  int64_t M = 0;
  /// The tile kernel dequantizes B once to bf16 ((q − z)·s rounded once) and runs a plain bf16
  /// GEMM instead of the exact per-group epilogue (the dispatcher sets it above a row count).
  bool dequantize_b = false;
  /// The kernels take the activations from `fixed` (filled by a16_fixed_fill) instead of `x`:
  /// two int8 rows (high and low bytes) per activation row (the dispatcher sets it at small M).
  bool fixed_point = false;
  A16FixedActivations fixed{};
};

/// Most fixed-point rows the tile kernel takes in one slice: two A tiles of 16 tile rows, each
/// activation row two of them (high and low bytes).
constexpr int64_t kFixedTileRows = 16;

/// The W4A16 call on fixed-point activations prepared in `fixed` (the int8 tiles, or up to four
/// rows in the AVX-512 streaming kernel).
inline A16Call fixed_point_call(const PackedLinear* w, const A16FixedActivations& fixed,
                                const OutputView& y, int64_t M) {
  A16Call call{w, {}, y, M};
  call.fixed_point = true;
  call.fixed = fixed;
  return call;
}

struct A8Call {
  static constexpr int kRowsPerPass = 4;
  const PackedLinear* w = nullptr;
  A8Activations x;
  OutputView y;
  int64_t M = 0;
};

/// Position of slot r (0..7) inside an 8-slot block of the A8 activation buffer.
constexpr int a8_position(int r) { return (r % 4) * 2 + r / 4; }

/// The value a 4-bit plane's unpacked bf16 word stands for is 128 + nibble; an 8-bit weight is
/// 16 × high + low, so its two planes add up to 16·(128+hi) + (128+lo) = 2176 + q.
constexpr float a16_weight_offset(int planes) { return planes == 1 ? 128.f : 2176.f; }

using A16Fn = void (*)(const A16Call&, int64_t m0, int64_t m1, int64_t p0, int64_t p1);
using A8Fn = void (*)(const A8Call&, int64_t m0, int64_t m1, int64_t p0, int64_t p1);

// One per ISA file. The AMX ones need rows padded to 16 in the activation buffers.
void a16_portable(const A16Call&, int64_t, int64_t, int64_t, int64_t);
void a8_portable(const A8Call&, int64_t, int64_t, int64_t, int64_t);
void a16_avx2(const A16Call&, int64_t, int64_t, int64_t, int64_t);
void a8_avx2(const A8Call&, int64_t, int64_t, int64_t, int64_t);
void a16_avx512(const A16Call&, int64_t, int64_t, int64_t, int64_t);
void a8_avx512(const A8Call&, int64_t, int64_t, int64_t, int64_t);
void a16_amx(const A16Call&, int64_t, int64_t, int64_t, int64_t);
void a8_amx(const A8Call&, int64_t, int64_t, int64_t, int64_t);
/// a16_amx above the crossover (A16Call::dequantize_b): B dequantized to bf16, a plain bf16 GEMM.
void a16_dequantized_amx(const A16Call&, int64_t, int64_t, int64_t, int64_t);

/// Scale and zero point of column c of a panel's group (portable decode of the scale words).
inline void scale_and_zero(const PackedLinear& w, int64_t panel, int64_t group, int c, float* scale,
                           int* zero) {
  *zero = w.zeros_of(panel, group)[c];
  switch (w.scale_format) {
    case PackedLinear::ScaleFormat::f16:
      *scale = sdk::f16_to_f32(w.halfs_of(panel, group)[c]);
      break;
    case PackedLinear::ScaleFormat::bf16:
      *scale = sdk::bf16_to_f32(w.halfs_of(panel, group)[c]);
      break;
    case PackedLinear::ScaleFormat::f32: {
      const uint32_t word = w.words_of(panel, group)[c];
      std::memcpy(scale, &word, sizeof *scale);
      break;
    }
  }
}

/// Store `count` fp32 results of row m starting at column n0 (columns ≥ N are dropped).
inline void store_portable_n(const OutputView& y, int64_t m, int64_t n0, const float* v,
                             int count) {
  const int64_t n_end = std::min<int64_t>(n0 + count, y.N);
  for (int64_t n = n0; n < n_end; ++n) sdk::store_float(y.data, y.dtype, y.offset(m, n), v[n - n0]);
}
inline void store_portable(const OutputView& y, int64_t m, int64_t n0, const float* v) {
  store_portable_n(y, m, n0, v, kPanel);
}

/// The unpacked values (0..15, or 0..255 for 8-bit) of one (panel, k-tile): vals[column][slot].
inline void unpack_tile_portable(const PackedLinear& w, int64_t panel, int64_t ktile,
                                 uint8_t vals[kPanel][kTileK]) {
  const uint8_t* t = w.tile(panel, ktile);
  for (int c = 0; c < kPanel; ++c)
    for (int j = 0; j < kTileK; ++j) vals[c][j] = 0;
  for (int plane = 0; plane < w.planes; ++plane)
    for (int sub = 0; sub < 4; ++sub)
      for (int word = 0; word < 32; ++word) {
        const uint8_t* b = t + plane * kTileBytes + sub * 64 + 2 * word;
        const unsigned v = unsigned(b[0]) | (unsigned(b[1]) << 8);
        for (int s = 0; s < 4; ++s)
          vals[word / 2][8 * sub + 2 * s + word % 2] |=
              uint8_t(((v >> (4 * s)) & 0xF) << (4 * plane));
      }
}

}  // namespace nibble::cpu_amx
