// Owned device allocations, made on their device and freed there.
#include "device_buffer.hpp"

#include <cuda_runtime_api.h>

#include <string>

#include "cuda_error.hpp"

namespace nibble::cuda {

DeviceBuffer::DeviceBuffer(int device, size_t bytes) : bytes_(bytes), device_(device) {
  if (bytes == 0) return;
  DeviceGuard guard(device);
  check(cudaMalloc(&ptr_, bytes),
        "cudaMalloc of " + std::to_string(bytes) + " bytes on device " + std::to_string(device));
}

DeviceBuffer DeviceBuffer::upload(int device, const void* host, size_t bytes) {
  DeviceBuffer b(device, bytes);
  if (bytes == 0) return b;
  DeviceGuard guard(device);
  check(cudaMemcpy(b.ptr_, host, bytes, cudaMemcpyHostToDevice),
        "uploading " + std::to_string(bytes) + " bytes to device " + std::to_string(device));
  return b;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    release();
    ptr_ = o.ptr_;
    bytes_ = o.bytes_;
    device_ = o.device_;
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() { release(); }

void DeviceBuffer::release() noexcept {
  if (!ptr_) return;
  int previous = 0;
  const bool switched = cudaGetDevice(&previous) == cudaSuccess && previous != device_ &&
                        cudaSetDevice(device_) == cudaSuccess;
  cudaFree(ptr_);
  if (switched) cudaSetDevice(previous);
  ptr_ = nullptr;
}

}  // namespace nibble::cuda
