// The cuBLAS handle pool.
#include "cublas_pool.hpp"

#include <nibble/sdk/plugin.hpp>

#include <cuda_runtime_api.h>

#include <string>

namespace nibble::cuda {

cublasHandle_t CublasPool::acquire(int device) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (size_t(device) < free_.size() && !free_[size_t(device)].empty()) {
      cublasHandle_t h = free_[size_t(device)].back();
      free_[size_t(device)].pop_back();
      return h;
    }
  }
  cublasHandle_t h = nullptr;
  const cublasStatus_t s = cublasCreate(&h);
  if (s != CUBLAS_STATUS_SUCCESS)
    throw sdk::PluginError(
        s == CUBLAS_STATUS_ALLOC_FAILED ? NIBBLE_OUT_OF_MEMORY : NIBBLE_UNAVAILABLE,
        std::string("cublasCreate on cuda:") + std::to_string(device) + ": " +
            cublasGetStatusString(s));
  return h;
}

void CublasPool::release(int device, cublasHandle_t handle) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (free_.size() <= size_t(device)) free_.resize(size_t(device) + 1);
  free_[size_t(device)].push_back(handle);
}

void CublasPool::clear() noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  int previous = 0;
  if (cudaGetDevice(&previous) != cudaSuccess) previous = -1;
  for (size_t d = 0; d < free_.size(); ++d) {
    if (free_[d].empty()) continue;
    cudaSetDevice(int(d));  // a handle is destroyed on the device it was made on
    for (cublasHandle_t h : free_[d]) cublasDestroy(h);
  }
  if (previous >= 0) cudaSetDevice(previous);
  free_.clear();
}

}  // namespace nibble::cuda
