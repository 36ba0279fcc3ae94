// The per-row arithmetic of activation preparation, once portable and once with AVX-512 (chosen by
// the ISA level). Both compute the same bits: conversions are exact or round-to-nearest-even as in
// sdk::f32_to_bf16, int8 quantization follows activations.cpp's definition, and a bf16 row's sum
// has one fixed order (below), so every ISA path sees identical activations.
#pragma once

#include "probe.hpp"

#include <dlpack/dlpack.h>

#include <cmath>
#include <cstdint>
#include <cstring>

namespace nibble::cpu_amx {

/// One chunk of a row in the w4a16 fixed-point form (A16FixedActivations).
struct FixedChunk {
  float step;   ///< 2^-shift, or a quiet NaN when the chunk holds a NaN or an infinity
  int32_t sum;  ///< Σ v
};

/// The fixed-point shift for a chunk whose largest magnitude is amax (finite, > 0): 13 − E with E
/// its exponent field − 127, at least −126, so |x| · 2^shift < 2^14 for every x of the chunk.
inline int fixed_point_shift(float amax) {
  uint32_t bits;
  std::memcpy(&bits, &amax, 4);
  const int e = int((bits >> 23) & 0xFF) - 127;
  return 13 - (e < -126 ? -126 : e);
}
/// 2^-shift (shift ≤ 139, so it is at least the smallest subnormal: exact).
inline float fixed_point_step(int shift) { return std::ldexp(1.f, -shift); }

struct RowKernels {
  /// n values of an f32, f16 or bf16 row as fp32 (exact).
  void (*widen)(const void* src, DLDataType dtype, int64_t n, float* out);
  /// n floats as bf16 bits, round-to-nearest-even, NaN kept quiet (sdk::f32_to_bf16).
  void (*to_bf16)(const float* in, int64_t n, uint16_t* out);
  /// Sum of n bf16 values (n a multiple of 16) in fp32, in the order: lane l (0..15) adds
  /// v[l], v[l+16], v[l+32], ... in turn; then lanes fold as l += l+8, l += l+4, l += l+2,
  /// l += l+1 for the lower half each time; lane 0 is the sum.
  float (*sum_bf16)(const uint16_t* v, int64_t n);
  /// Quantize n floats (n a multiple of 16): amax = max(max|x|, 1e-7), sa = amax / 127,
  /// q = clamp(round-half-even(x · (127 / amax)), ±127); q stored in the A8 slot positions
  /// (a8_position within each 8 slots). Returns sa, or a quiet NaN when any x is NaN (so the NaN
  /// reaches the row's outputs; an infinite x already makes sa infinite).
  float (*quantize)(const float* in, int64_t n, int8_t* out);
  /// n floats (n a multiple of 16) in 15-bit fixed point: E = (the exponent field of max|x|) − 127,
  /// at least −126; shift = 13 − E; v = round-half-even(x · 2^shift), one rounding; the high byte
  /// (v + 128) >> 8 to hi and v − 256·high to lo, both at the A8 slot positions. All zeros give
  /// step 1; a NaN or an infinite x gives zeros and a NaN step.
  FixedChunk (*to_fixed)(const float* in, int64_t n, int8_t* hi, int8_t* lo);
  /// to_fixed of n slots (n a multiple of 16, at most kMaxFixedSlots) of which the first `valid`
  /// are src's values (f32, f16 or bf16) and the rest zero: the bits of widening them into such
  /// slots and calling to_fixed, without a staging pass over memory.
  FixedChunk (*to_fixed_from)(const void* src, DLDataType dtype, int64_t valid, int64_t n,
                              int8_t* hi, int8_t* lo);
  /// Σ v of n int8 values (exact).
  int32_t (*sum_i8)(const int8_t* v, int64_t n);
};

/// The most slots to_fixed_from converts at once: one chunk of min(group size, 128) inputs,
/// padded to 32-slot tiles (docs/formats.md#w4a8-numerics).
inline constexpr int64_t kMaxFixedSlots = 128;

/// The row kernels for an ISA level (AVX-512 ones from the avx512 level up).
RowKernels row_kernels(IsaLevel level);

/// The AVX-512 row kernels (activation_rows_avx512.cpp, built with AVX-512 flags); callers go
/// through row_kernels(), which hands them out only where the probe found AVX-512.
RowKernels row_kernels_avx512();

}  // namespace nibble::cpu_amx
