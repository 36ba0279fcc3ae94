// Whether this machine can run the cuda backend: a CUDA driver and at least one GPU of compute
// capability 9.0 or newer (the kernels are sm_90 code plus PTX).
#pragma once

#include <string>

namespace nibble::cuda {

/// What the probe found.
struct ProbeResult {
  bool available = false;
  bool device_absent = false;  ///< no driver or no GPU (else a dependency is missing)
  std::string detail;          ///< why not, or the devices found
};

/// Ask the CUDA runtime for the devices; never throws, starts no thread.
ProbeResult probe_devices();

/// The lowest compute capability (major * 10 + minor) the kernels run on.
constexpr int kMinComputeCapability = 90;

}  // namespace nibble::cuda
