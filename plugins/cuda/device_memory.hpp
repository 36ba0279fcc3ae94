// The backend's nibble_device_memory: cudaMalloc / cudaFree / cudaMemcpyAsync /
// cudaStreamSynchronize on the device a host names, each call switching to that device and back,
// and CUDA events as the device's clock for a host's timings.
#pragma once

#include <nibble/sdk/plugin.hpp>

namespace nibble::cuda {

/// CUDA device memory for hosts that link no CUDA library.
class CudaDeviceMemory : public sdk::DeviceMemory {
 public:
  int32_t device_type() const override;
  int device_count() override;
  void* alloc(int device_id, size_t bytes) override;
  void free(int device_id, void* ptr) noexcept override;
  void copy(int device_id, void* dst, const void* src, size_t bytes, sdk::CopyDirection direction,
            void* stream) override;
  void synchronize(int device_id, void* stream) override;
  bool has_events() const override { return true; }
  void* event_create(int device_id) override;
  void event_destroy(int device_id, void* event) noexcept override;
  void event_record(int device_id, void* event, void* stream) override;
  double event_elapsed(int device_id, void* start, void* end) override;
};

/// CUDA devices on this machine (0 without a driver or a GPU).
int cuda_device_count();

}  // namespace nibble::cuda
