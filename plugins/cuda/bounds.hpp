// The error bounds the cuda backend's kernels declare: ‖y − y_ref‖ / ‖y_ref‖ against float64 on
// the same rounded inputs (docs/cuda.md#numerics says where each comes from).
#pragma once

namespace nibble::cuda {

// f32 activations run as two bf16 terms (hi + lo carry 16 significant bits, 2^-17 relative per
// element) against exact q − z, fp32 scales and fp32 accumulation: at most 2.8e-6 measured.
constexpr double kBoundF32 = 2e-5;
// f16 / bf16: no weight or scale is rounded, so rounding y itself is the error (at most 2.3e-4
// and 1.9e-3 measured); the margin covers layers with few outputs, whose ratio varies more. The
// bf16 MoE also rounds its h = silu(gate) · up once to bf16 (at most 2.9e-3 measured).
constexpr double kBoundF16 = 1e-3;
constexpr double kBoundBf16 = 6e-3;

}  // namespace nibble::cuda
