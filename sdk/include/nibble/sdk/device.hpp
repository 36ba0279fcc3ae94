// Which DLPack devices a CPU kernel reads and writes directly. One answer for both sides of the
// ABI: the host validates tensors with it before a plugin sees them, and the plugin-side layer
// (plugin.hpp) validates them again with it, so the two can never disagree.
#pragma once

#include <dlpack/dlpack.h>

namespace nibble::sdk {

/// Whether `device` is memory the CPU addresses directly: ordinary host memory (kDLCPU) or pinned
/// host memory a GPU runtime allocated (kDLCUDAHost, kDLROCMHost), which engines use to stage
/// transfers. Managed memory (kDLCUDAManaged) is not: its pages may sit on the GPU.
constexpr bool is_cpu_memory(const DLDevice& device) {
  return device.device_type == kDLCPU || device.device_type == kDLCUDAHost ||
         device.device_type == kDLROCMHost;
}

}  // namespace nibble::sdk
