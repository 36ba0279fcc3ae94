// What the cuda bench's parts share: the device and its stream, owned device arrays, CUDA-event
// timing of repeated calls, and error checks that throw.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace nibble::cuda::bench {

/// Throw unless `e` is cudaSuccess.
inline void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorName(e) + " (" +
                             cudaGetErrorString(e) + ")");
}
/// Throw unless `s` is CUBLAS_STATUS_SUCCESS.
inline void check_blas(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string(what) + ": " + cublasGetStatusString(s));
}

/// Device 0, a stream on it, and what bounds the kernels.
struct Device {
  std::string name;
  int sms = 0;
  size_t l2_bytes = 0;
  double copy_tbs = 0;  ///< measured device-to-device copy bandwidth (read + write)
  /// Nominal memory bandwidth from the memory clock and bus width the device reports (double data
  /// rate), 0 where it reports none.
  double nominal_tbs = 0;
  cudaStream_t stream = nullptr;  ///< a non-blocking stream, or null: the legacy default stream
};

/// Open device 0 and measure its copy bandwidth; the calls go to a non-blocking stream of their
/// own, or with `legacy_stream` to the legacy default stream (what a host passing no stream gets).
Device open_device(bool legacy_stream);

/// A device allocation owned by the bench.
class DeviceArray {
 public:
  explicit DeviceArray(size_t bytes) { check_cuda(cudaMalloc(&p_, bytes), "cudaMalloc"); }
  ~DeviceArray() { cudaFree(p_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  void* get() const { return p_; }
  void* at(size_t offset) const { return static_cast<char*>(p_) + offset; }

 private:
  void* p_ = nullptr;
};

/// Mean microseconds per call on the device (CUDA events around the calls) and on the host (the
/// wall time of queuing them: when it reaches the device time, the host is what limits).
struct Timing {
  double device_us = 0;
  double host_us = 0;
};

/// Time `iters` calls of `call(i)` queued on `stream`, after warm-up calls.
Timing time_calls(int iters, cudaStream_t stream, const std::function<void(int)>& call);

/// The experts of the MoE bench: E experts of K × 2I (gate and up) and I × K (down), top_k per
/// token; Mixtral-like by default. Symmetric (every zero point 8, which the packer leaves out)
/// unless `asymmetric` (random zero points, as an AWQ checkpoint's experts have).
struct MoeBenchShape {
  int experts = 8, top_k = 2;
  int64_t K = 4096, I = 14336;
  bool asymmetric = false;
};

/// The fused MoE of `shape` through the plugin at `plugin_path`, at M = 1, 4 and 16.
nlohmann::json run_moe(const std::string& plugin_path, int iters, double peak_tbs,
                       const Device& dev, const MoeBenchShape& shape);

}  // namespace nibble::cuda::bench
