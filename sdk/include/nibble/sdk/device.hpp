// Where tensors live, as both sides of the ABI see it: which DLPack devices a CPU kernel reads and
// writes directly, whether a tensor is on the device a kernel runs on, and one spelling of device
// names ("cpu", "cuda:1") for messages and options. One answer for both sides: the host validates
// tensors with it before a plugin sees them, and the plugin-side layer (plugin.hpp) validates them
// again with it, so the two can never disagree.
#pragma once

#include <dlpack/dlpack.h>

#include <cstdint>
#include <string>
#include <string_view>

namespace nibble::sdk {

/// Whether `device` is memory the CPU addresses directly: ordinary host memory (kDLCPU) or pinned
/// host memory a GPU runtime allocated (kDLCUDAHost, kDLROCMHost), which engines use to stage
/// transfers. Managed memory (kDLCUDAManaged) is not: its pages may sit on the GPU.
constexpr bool is_cpu_memory(const DLDevice& device) {
  return device.device_type == kDLCPU || device.device_type == kDLCUDAHost ||
         device.device_type == kDLROCMHost;
}

/// A kernel's or layer's device type as the ABI stores it, normalised: 0 (a field left unset, or
/// absent in an older struct) means kDLCPU, as it did before devices existed.
constexpr int32_t normal_device_type(int32_t device_type) {
  return device_type == 0 ? int32_t(kDLCPU) : device_type;
}

/// Whether a tensor on `tensor` may be handed to a kernel whose forward runs on `kernel`: any CPU
/// memory for a CPU kernel (the device index means nothing there), else exactly that device type
/// and index.
constexpr bool tensor_fits_device(const DLDevice& tensor, const DLDevice& kernel) {
  return normal_device_type(kernel.device_type) == kDLCPU
             ? is_cpu_memory(tensor)
             : tensor.device_type == kernel.device_type && tensor.device_id == kernel.device_id;
}

/// The name of a DLPack device type as nibble spells it in options and messages ("cpu", "cuda",
/// "rocm", "ext_dev", ...); "device type N" for one DLPack 0.6 does not define.
inline std::string device_type_name(int32_t device_type) {
  switch (normal_device_type(device_type)) {
    case kDLCPU:
      return "cpu";
    case kDLCUDA:
      return "cuda";
    case kDLCUDAHost:
      return "cuda_host";
    case kDLOpenCL:
      return "opencl";
    case kDLVulkan:
      return "vulkan";
    case kDLMetal:
      return "metal";
    case kDLVPI:
      return "vpi";
    case kDLROCM:
      return "rocm";
    case kDLROCMHost:
      return "rocm_host";
    case kDLExtDev:
      return "ext_dev";
    case kDLCUDAManaged:
      return "cuda_managed";
    default:
      return "device type " + std::to_string(device_type);
  }
}

/// The DLPack device type that `name` spells (the inverse of device_type_name), or 0 when it
/// spells none.
inline int32_t device_type_from_name(std::string_view name) {
  for (int32_t t : {kDLCPU, kDLCUDA, kDLCUDAHost, kDLOpenCL, kDLVulkan, kDLMetal, kDLVPI, kDLROCM,
                    kDLROCMHost, kDLExtDev, kDLCUDAManaged})
    if (device_type_name(t) == name) return t;
  return 0;
}

/// A device as text: "cpu" for host memory of any index, else "<type>:<index>" ("cuda:1").
inline std::string device_name(const DLDevice& device) {
  const int32_t type = normal_device_type(device.device_type);
  if (type == kDLCPU || type == kDLCUDAHost || type == kDLROCMHost) return device_type_name(type);
  return device_type_name(type) + ":" + std::to_string(device.device_id);
}

}  // namespace nibble::sdk
