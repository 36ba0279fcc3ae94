// The error bounds the cuda backend's kernels declare: ‖y − y_ref‖ / ‖y_ref‖ against float64 on
// the same rounded inputs (docs/cuda.md#numerics says where each comes from).
#pragma once

namespace nibble::cuda {

// f32 activations run as two bf16 terms (hi + lo carry 16 significant bits) against exact q − z,
// fp32 accumulation and fp32 scales: ~1e-5 measured.
constexpr double kBoundF32 = 5e-5;
// f16 / bf16: rounding y itself dominates (~3e-4 and ~2e-3 rms); the large-M kernel also rounds
// each dequantized weight once to the MMA type, which adds about as much again.
constexpr double kBoundF16 = 1e-3;
constexpr double kBoundBf16 = 6e-3;

}  // namespace nibble::cuda
