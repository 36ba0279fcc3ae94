// GPU test support: skip (with the probe's reason) where no usable GPU is, device arrays that
// free themselves, and the numeric bounds the kernels declare.
#pragma once

#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "bounds.hpp"
#include "launch.hpp"
#include "probe.hpp"
#include "reference.hpp"

namespace nibble::test {

/// GTEST_SKIP()s the calling test with the probe's words unless a usable GPU is present.
#define NIBBLE_REQUIRE_GPU()                                                               \
  do {                                                                                     \
    static const ::nibble::cuda::ProbeResult probe = ::nibble::cuda::probe_devices();      \
    if (!probe.available) GTEST_SKIP() << "no GPU for the cuda backend: " << probe.detail; \
  } while (0)

/// Fails the test when a CUDA call does.
inline void cuda_ok(cudaError_t e, const char* what) {
  ASSERT_EQ(e, cudaSuccess) << what << ": " << cudaGetErrorName(e) << " " << cudaGetErrorString(e);
}

/// A device array owned by a test.
class DeviceArray {
 public:
  DeviceArray() = default;
  explicit DeviceArray(size_t bytes) : bytes_(bytes) {
    if (bytes) {
      EXPECT_EQ(cudaMalloc(&p_, bytes), cudaSuccess);
    }
  }
  DeviceArray(const void* host, size_t bytes) : DeviceArray(bytes) {
    if (bytes) {
      EXPECT_EQ(cudaMemcpy(p_, host, bytes, cudaMemcpyHostToDevice), cudaSuccess);
    }
  }
  template <class T>
  explicit DeviceArray(const std::vector<T>& v) : DeviceArray(v.data(), v.size() * sizeof(T)) {}
  ~DeviceArray() {
    if (p_) cudaFree(p_);
  }
  DeviceArray(DeviceArray&& o) noexcept : p_(o.p_), bytes_(o.bytes_) { o.p_ = nullptr; }
  DeviceArray& operator=(DeviceArray&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  void* get() const { return p_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(p_);
  }
  /// The array's bytes, after the device has finished.
  std::vector<uint8_t> download() const {
    std::vector<uint8_t> out(bytes_);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    if (bytes_) {
      EXPECT_EQ(cudaMemcpy(out.data(), p_, bytes_, cudaMemcpyDeviceToHost), cudaSuccess);
    }
    return out;
  }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

/// The kernels' dtype for a DLPack float dtype.
inline cuda::DType dtype_of(DLDataType t) {
  if (t.code == kDLFloat && t.bits == 32) return cuda::DType::f32;
  return t.code == kDLBfloat ? cuda::DType::bf16 : cuda::DType::f16;
}

/// The declared bound for activations of dtype `t`.
inline double bound_for(DLDataType t) {
  if (t.bits == 32) return cuda::kBoundF32;
  return t.code == kDLBfloat ? cuda::kBoundBf16 : cuda::kBoundF16;
}

/// Bias of `w` as fp32 (empty without bias), as the plugin uploads it.
inline std::vector<float> bias_f32(const CanonicalWeight& w) {
  std::vector<float> b;
  if (w.bias.empty()) return b;
  for (int64_t n = 0; n < w.N; ++n) b.push_back(float(w.bias_at(n)));
  return b;
}

}  // namespace nibble::test
