// Device memory a prepared weight owns: one cudaMalloc per buffer on the layer's device, freed on
// destruction, and filled from host vectors at prepare.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace nibble::cuda {

/// An owned device allocation.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  /// `bytes` on `device` (throws OUT_OF_MEMORY / UNAVAILABLE).
  DeviceBuffer(int device, size_t bytes);
  /// A copy of `bytes` bytes at `host` on `device` (synchronous).
  static DeviceBuffer upload(int device, const void* host, size_t bytes);
  /// A copy of `v` on `device`; empty vectors give an empty buffer.
  template <class T>
  static DeviceBuffer upload(int device, const std::vector<T>& v) {
    return upload(device, v.data(), v.size() * sizeof(T));
  }
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept { *this = static_cast<DeviceBuffer&&>(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  /// The device address (nullptr when empty).
  void* get() const { return ptr_; }
  /// The device address as T*.
  template <class T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void release() noexcept;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  int device_ = 0;
};

}  // namespace nibble::cuda
