// The probe: cudaGetDeviceCount answers whether a driver and a GPU are there (the statically
// linked runtime loads libcuda.so itself and reports its absence as an error, it does not fail
// to load), then each device's name, multiprocessors, memory and compute capability.
#include "probe.hpp"

#include <cuda_runtime_api.h>

#include <cstdio>

namespace nibble::cuda {

ProbeResult probe_devices() {
  ProbeResult r;
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    r.device_absent = e == cudaSuccess || e == cudaErrorNoDevice ||
                      e == cudaErrorInsufficientDriver || e == cudaErrorInitializationError;
    r.detail = e == cudaSuccess ? std::string("no CUDA device")
                                : std::string("no usable CUDA device: ") + cudaGetErrorName(e) +
                                      " (" + cudaGetErrorString(e) + ")";
    cudaGetLastError();  // the error is reported here, not left for the next call
    return r;
  }
  int usable = 0;
  for (int d = 0; d < count; ++d) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, d) != cudaSuccess) continue;
    const int cc = p.major * 10 + p.minor;
    char memory[32];
    std::snprintf(memory, sizeof memory, "%.1f GiB", double(p.totalGlobalMem) / (1 << 30));
    r.detail += (d ? "; " : "") + std::to_string(d) + ": " + p.name + ", sm_" + std::to_string(cc) +
                ", " + std::to_string(p.multiProcessorCount) + " SMs, " + memory +
                (cc >= kMinComputeCapability ? "" : " (below sm_90: not used)");
    usable += cc >= kMinComputeCapability;
  }
  r.available = usable > 0;
  if (!r.available) r.detail = "no GPU of compute capability 9.0 or newer: " + r.detail;
  return r;
}

}  // namespace nibble::cuda
