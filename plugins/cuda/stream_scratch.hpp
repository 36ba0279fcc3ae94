// Device scratch for one forward, taken and given back in stream order (cudaMallocAsync /
// cudaFreeAsync on the call's stream): concurrent forwards on one prepared weight each get their
// own, and nothing waits for the device.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>

#include "cuda_error.hpp"

namespace nibble::cuda {

/// `bytes` of device memory valid for the work queued on `stream` until this object dies.
class StreamScratch {
 public:
  StreamScratch(size_t bytes, cudaStream_t stream, const std::string& what) : stream_(stream) {
    if (bytes == 0) return;
    check(cudaMallocAsync(&p_, bytes, stream),
          what + ": cudaMallocAsync of " + std::to_string(bytes) + " bytes of scratch");
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
