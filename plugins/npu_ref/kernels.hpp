// npu_ref's kernels, their shared limits and declared error bounds.
#pragma once

#include <nibble/sdk/plugin.hpp>

#include <cstdint>
#include <memory>
#include <string>

namespace nibble::npu_ref {

// Low, so that a native backend (cpu_amx, ~100) wins under "auto".
constexpr int kPriority = 10;
// ‖y − y_ref‖/‖y_ref‖ against float64 on the same rounded inputs. f32: fp32 products summed in
// runs of ≤ 128 (measured ~1e-7). f16/bf16: dominated by rounding y itself (about u/√12 · 1.4,
// i.e. ~2e-4 and ~1.6e-3), with a margin of 2.5×.
constexpr double kBoundF32 = 1e-5;
constexpr double kBoundF16 = 5e-4;
constexpr double kBoundBf16 = 4e-3;

/// Checks shared by the quantized kernels; "" when the layer is computable.
std::string why_not_quantized(const nibble_layer_desc& d);
/// Kernel info with npu_ref's priority and bounds.
sdk::KernelInfo kernel_info(const char* name, nibble_op op, nibble_numeric_mode mode);

std::unique_ptr<sdk::Kernel> make_linear_kernel();
std::unique_ptr<sdk::Kernel> make_dense_kernel();
std::unique_ptr<sdk::Kernel> make_moe_kernel();

}  // namespace nibble::npu_ref
