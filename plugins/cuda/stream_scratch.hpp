// Device scratch for one forward, taken and given back in stream order (cudaMallocFromPoolAsync /
// cudaFreeAsync on the call's stream): concurrent forwards on one prepared weight each get their
// own, and nothing waits for the device. The memory comes from the plugin's own pool per device
// (shared by its loads), which keeps up to kScratchKeptBytes between calls: the device's default
// pool gives everything back to the driver at each synchronization, and the next call would map it
// again.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>

#include "cuda_error.hpp"

namespace nibble::cuda {

/// What the scratch pool of a device keeps mapped between calls.
constexpr size_t kScratchKeptBytes = size_t(256) << 20;

/// The scratch pool of `device` (made on first use); throws when CUDA cannot make it.
cudaMemPool_t scratch_pool(int device);

/// Count one more load of the plugin that may use the scratch pools (at the backend's creation).
void retain_scratch_pools() noexcept;

/// End one load's use of the pools; the last load's release destroys every pool (memory still in
/// use is released when its last free completes).
void release_scratch_pools() noexcept;

/// `bytes` of device memory on the current device, valid for the work queued on `stream` until
/// this object dies.
class StreamScratch {
 public:
  StreamScratch(size_t bytes, cudaStream_t stream, const std::string& what) : stream_(stream) {
    if (bytes == 0) return;
    int device = 0;
    check(cudaGetDevice(&device), what + ": cudaGetDevice");
    check(cudaMallocFromPoolAsync(&p_, bytes, scratch_pool(device), stream),
          what + ": cudaMallocFromPoolAsync of " + std::to_string(bytes) + " bytes of scratch");
  }
  ~StreamScratch() {
    if (p_) cudaFreeAsync(p_, stream_);
  }
  StreamScratch(const StreamScratch&) = delete;
  StreamScratch& operator=(const StreamScratch&) = delete;
  /// Byte `offset` of the scratch, as T*.
  template <class T>
  T* at(size_t offset = 0) const {
    return reinterpret_cast<T*>(static_cast<char*>(p_) + offset);
  }

 private:
  void* p_ = nullptr;
  cudaStream_t stream_;
};

}  // namespace nibble::cuda
