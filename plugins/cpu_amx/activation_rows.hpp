// The per-row arithmetic of activation preparation, once portable and once with AVX-512 (chosen by
// the ISA level). Both compute the same bits: conversions are exact or round-to-nearest-even as in
// sdk::f32_to_bf16, int8 quantization follows activations.cpp's definition, and a bf16 row's sum
// has one fixed order (below), so every ISA path sees identical activations.
#pragma once

#include "probe.hpp"

#include <dlpack/dlpack.h>

#include <cstdint>

namespace nibble::cpu_amx {

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
};

/// The row kernels for an ISA level (AVX-512 ones from the avx512 level up).
RowKernels row_kernels(IsaLevel level);

/// The AVX-512 row kernels (activation_rows_avx512.cpp, built with AVX-512 flags); callers go
/// through row_kernels(), which hands them out only where the probe found AVX-512.
RowKernels row_kernels_avx512();

}  // namespace nibble::cpu_amx
