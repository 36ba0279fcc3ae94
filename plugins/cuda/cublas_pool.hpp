// cuBLAS handles for the dense kernel and linear_marlin's large-M path: one pool per load, a handle
// taken for the length of one call (cublasSetStream on a handle another thread is using would move
// its work), created lazily per device and destroyed at shutdown, while the CUDA runtime is still
// alive.
#pragma once

#include <cublas_v2.h>

#include <mutex>
#include <vector>

namespace nibble::cuda {

/// The pool of cuBLAS handles of one load.
class CublasPool {
 public:
  /// A handle of `device` (the current device), taken until release; throws UNAVAILABLE when
  /// cuBLAS cannot start.
  cublasHandle_t acquire(int device);
  /// Give a handle back.
  void release(int device, cublasHandle_t handle);
  /// Destroy every handle (no call may be in flight).
  void clear() noexcept;
  ~CublasPool() { clear(); }

 private:
  std::mutex mutex_;
  std::vector<std::vector<cublasHandle_t>> free_;  // per device
};

/// A handle from the pool for one scope.
class PooledHandle {
 public:
  PooledHandle(CublasPool& pool, int device)
      : pool_(pool), device_(device), h_(pool.acquire(device)) {}
  ~PooledHandle() { pool_.release(device_, h_); }
  PooledHandle(const PooledHandle&) = delete;
  PooledHandle& operator=(const PooledHandle&) = delete;
  cublasHandle_t get() const { return h_; }

 private:
  CublasPool& pool_;
  int device_;
  cublasHandle_t h_;
};

}  // namespace nibble::cuda
