// A borrowed 2-D row-major CPU DLTensor over a host's own buffer: how a host lends activations,
// outputs and routing to a forward call. Header-only.
#pragma once

#include <dlpack/dlpack.h>

#include <cstdint>

namespace nibble::sdk::host {

/// A [shape[0], shape[1]] packed tensor of `dtype` at `data`; `shape` must outlive the tensor.
inline DLTensor matrix_view(const void* data, DLDataType dtype, int64_t* shape) {
  DLTensor t{};
  t.data = const_cast<void*>(data);
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = 2;
  t.dtype = dtype;
  t.shape = shape;
  return t;
}

}  // namespace nibble::sdk::host
