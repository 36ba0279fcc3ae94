// Device memory for hosts: every call names its device, so each switches to it and back.
#include "device_memory.hpp"

#include <cuda_runtime_api.h>

#include <memory>
#include <string>

#include "cuda_error.hpp"

namespace nibble::cuda {

namespace {

void require_device(int device_id) {
  const int count = cuda_device_count();
  if (device_id < 0 || device_id >= count)
    throw sdk::PluginError(NIBBLE_INVALID_ARGUMENT,
                           "device memory: cuda:" + std::to_string(device_id) +
                               " does not exist (this machine has " + std::to_string(count) +
                               " CUDA device" + (count == 1 ? "" : "s") + ")");
}

}  // namespace

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

int32_t CudaDeviceMemory::device_type() const { return kDLCUDA; }

int CudaDeviceMemory::device_count() { return cuda_device_count(); }

void* CudaDeviceMemory::alloc(int device_id, size_t bytes) {
  require_device(device_id);
  DeviceGuard guard(device_id);
  void* p = nullptr;
  check(cudaMalloc(&p, bytes), "device memory: cudaMalloc of " + std::to_string(bytes) +
                                   " bytes on cuda:" + std::to_string(device_id));
  return p;
}

void CudaDeviceMemory::free(int device_id, void* ptr) noexcept {
  if (!ptr) return;
  int previous = 0;
  const bool switched = cudaGetDevice(&previous) == cudaSuccess && previous != device_id &&
                        cudaSetDevice(device_id) == cudaSuccess;
  cudaFree(ptr);
  if (switched) cudaSetDevice(previous);
}

void CudaDeviceMemory::copy(int device_id, void* dst, const void* src, size_t bytes,
                            sdk::CopyDirection direction, void* stream) {
  require_device(device_id);
  DeviceGuard guard(device_id);
  const cudaMemcpyKind kind =
      direction == sdk::CopyDirection::host_to_device   ? cudaMemcpyHostToDevice
      : direction == sdk::CopyDirection::device_to_host ? cudaMemcpyDeviceToHost
                                                        : cudaMemcpyDeviceToDevice;
  check(cudaMemcpyAsync(dst, src, bytes, kind, static_cast<cudaStream_t>(stream)),
        "device memory: cudaMemcpyAsync of " + std::to_string(bytes) +
            " bytes on cuda:" + std::to_string(device_id));
}

void CudaDeviceMemory::synchronize(int device_id, void* stream) {
  require_device(device_id);
  DeviceGuard guard(device_id);
  check(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)),
        "device memory: cudaStreamSynchronize on cuda:" + std::to_string(device_id));
}

// An event is the cudaEvent_t with whether it was recorded: cudaEventElapsedTime on an event never
// recorded fails with a status that names no event, so the host gets a clear refusal instead.
namespace {

struct TimedEvent {
  cudaEvent_t event = nullptr;
  bool recorded = false;
};

TimedEvent& event_of(void* event, const char* call) {
  if (!event)
    throw sdk::PluginError(NIBBLE_INVALID_ARGUMENT,
                           std::string("device event ") + call + ": no event");
  return *static_cast<TimedEvent*>(event);
}

}  // namespace

void* CudaDeviceMemory::event_create(int device_id) {
  require_device(device_id);
  DeviceGuard guard(device_id);
  auto e = std::make_unique<TimedEvent>();
  check(cudaEventCreate(&e->event),
        "device event: cudaEventCreate on cuda:" + std::to_string(device_id));
  return e.release();
}

void CudaDeviceMemory::event_destroy(int device_id, void* event) noexcept {
  if (!event) return;
  auto* e = static_cast<TimedEvent*>(event);
  int previous = 0;
  const bool switched = cudaGetDevice(&previous) == cudaSuccess && previous != device_id &&
                        cudaSetDevice(device_id) == cudaSuccess;
  cudaEventDestroy(e->event);  // a pending recording completes on its own
  if (switched) cudaSetDevice(previous);
  delete e;
}

void CudaDeviceMemory::event_record(int device_id, void* event, void* stream) {
  require_device(device_id);
  TimedEvent& e = event_of(event, "record");
  DeviceGuard guard(device_id);
  check(cudaEventRecord(e.event, static_cast<cudaStream_t>(stream)),
        "device event: cudaEventRecord on cuda:" + std::to_string(device_id));
  e.recorded = true;
}

double CudaDeviceMemory::event_elapsed(int device_id, void* start, void* end) {
  require_device(device_id);
  TimedEvent& a = event_of(start, "elapsed");
  TimedEvent& b = event_of(end, "elapsed");
  if (!a.recorded || !b.recorded)
    throw sdk::PluginError(NIBBLE_INVALID_ARGUMENT, std::string("device event elapsed: the ") +
                                                        (a.recorded ? "end" : "start") +
                                                        " event was never recorded");
  DeviceGuard guard(device_id);
  const std::string where = " on cuda:" + std::to_string(device_id);
  check(cudaEventSynchronize(b.event), "device event: cudaEventSynchronize" + where);
  check(cudaEventSynchronize(a.event), "device event: cudaEventSynchronize" + where);
  float ms = 0;
  check(cudaEventElapsedTime(&ms, a.event, b.event), "device event: cudaEventElapsedTime" + where);
  return double(ms) * 1e-3;
}

}  // namespace nibble::cuda
