// The cuda backend's kernels: their priorities, declared bounds, the checks they share, and the
// factories backend.cpp lists.
#pragma once

#include <nibble/sdk/plugin.hpp>

#include <memory>
#include <string>

#include "cublas_pool.hpp"

namespace nibble::cuda {

// Device kernels only ever compete with kernels of their own device; among them the Marlin layout
// wins wherever its rules hold, as upstream prefers it, and the general layout takes the rest.
constexpr int kMarlinPriority = 100;
constexpr int kGeneralPriority = 50;
constexpr int kDensePriority = 100;

/// Kernel info with the backend's bounds, on kDLCUDA.
sdk::KernelInfo kernel_info(const char* name, nibble_op op, int priority, nibble_numeric_mode mode);
/// Why no CUDA kernel can take the layer's device index ("" when it exists).
std::string why_not_device(const nibble_layer_desc& d);
/// The checks every quantized kernel here shares (numeric mode, bits, shape, dtypes, device).
std::string why_not_quantized(const nibble_layer_desc& d);

/// `linear_marlin`: the Marlin layout's kernels, cuBLAS (from `cublas`) behind its large-M path.
std::unique_ptr<sdk::Kernel> make_marlin_linear(std::shared_ptr<CublasPool> cublas);
/// `linear_general`: every valid quantized weight, in the general layout.
std::unique_ptr<sdk::Kernel> make_general_linear();
/// `dense_cublas`: f32/f16/bf16 weights through cuBLAS handles from `cublas`.
std::unique_ptr<sdk::Kernel> make_dense(std::shared_ptr<CublasPool> cublas);
/// `moe_marlin`: the fused MoE on Marlin-layout experts.
std::unique_ptr<sdk::Kernel> make_marlin_moe();

}  // namespace nibble::cuda
