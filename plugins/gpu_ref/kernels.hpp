// gpu_ref's kernels, their shared limits and declared error bounds.
#pragma once

#include <nibble/sdk/plugin.hpp>

#include <memory>
#include <string>

namespace nibble::gpu_ref {

// Low, so that a native backend (cpu_amx, ~100) wins under "auto"; Marlin above ExLlama, as
// upstream prefers Marlin wherever its rules hold.
constexpr int kMarlinPriority = 20;
constexpr int kExllamaPriority = 15;
constexpr int kDensePriority = 15;

// ‖y − y_ref‖/‖y_ref‖ against float64 on the same rounded inputs. f32: fp32 products summed in
// runs of ≤ 128 (measured ~1e-7). f16/bf16: dominated by rounding y itself (~2e-4 and ~1.6e-3),
// with a margin of 2.5×.
constexpr double kBoundF32 = 1e-5;
constexpr double kBoundF16 = 5e-4;
constexpr double kBoundBf16 = 4e-3;

/// Checks every quantized kernel of gpu_ref shares; "" when the layer is computable.
std::string why_not_quantized(const nibble_layer_desc& d);
/// MoE-specific checks on top of why_not_quantized.
std::string why_not_moe(const nibble_layer_desc& d);
/// Kernel info with gpu_ref's bounds.
sdk::KernelInfo kernel_info(const char* name, nibble_op op, int priority, nibble_numeric_mode mode);

std::unique_ptr<sdk::Kernel> make_marlin_linear();
std::unique_ptr<sdk::Kernel> make_exllama_linear();
std::unique_ptr<sdk::Kernel> make_dense();
std::unique_ptr<sdk::Kernel> make_marlin_moe();
std::unique_ptr<sdk::Kernel> make_exllama_moe();

}  // namespace nibble::gpu_ref
