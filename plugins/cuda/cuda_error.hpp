// CUDA runtime errors as the SDK's PluginError: out-of-memory as OUT_OF_MEMORY, a missing driver
// or device as UNAVAILABLE, anything else as INTERNAL, each naming the call that failed.
#pragma once

#include <nibble/sdk/plugin.hpp>

#include <cuda_runtime_api.h>

#include <string>

namespace nibble::cuda {

/// The status a CUDA error maps to.
inline nibble_status status_of(cudaError_t e) {
  switch (e) {
    case cudaErrorMemoryAllocation:
      return NIBBLE_OUT_OF_MEMORY;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice:
    case cudaErrorInitializationError:
      return NIBBLE_UNAVAILABLE;
    case cudaErrorInvalidValue:
      return NIBBLE_INVALID_ARGUMENT;
    default:
      return NIBBLE_INTERNAL;
  }
}

/// Throw a PluginError naming `what` unless `e` is cudaSuccess (the error is also cleared from
/// the runtime, so the next call does not see it).
inline void check(cudaError_t e, const std::string& what) {
  if (e == cudaSuccess) return;
  cudaGetLastError();
  throw sdk::PluginError(status_of(e),
                         what + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

/// Makes `device` current for its lifetime and restores the previous device.
class DeviceGuard {
 public:
  /// Switch to `device` (throws UNAVAILABLE when it does not exist).
  explicit DeviceGuard(int device) {
    check(cudaGetDevice(&previous_), "cudaGetDevice");
    if (previous_ != device)
      check(cudaSetDevice(device), "cudaSetDevice(" + std::to_string(device) + ")");
  }
  ~DeviceGuard() {
    int now = previous_;
    if (cudaGetDevice(&now) == cudaSuccess && now != previous_) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

}  // namespace nibble::cuda
