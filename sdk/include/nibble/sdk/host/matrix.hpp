// A borrowed 2-D row-major DLTensor over a host's own buffer (host memory, or device memory the
// host allocated): how a host lends activations, outputs and routing to a forward call.
// Header-only.
#pragma once

#include <dlpack/dlpack.h>

#include <cstdint>

namespace nibble::sdk::host {

/// A [shape[0], shape[1]] packed tensor of `dtype` at `data` on `device`; `shape` must outlive
/// the tensor.
inline DLTensor matrix_view(const void* data, DLDataType dtype, int64_t* shape,
                            DLDevice device = DLDevice{kDLCPU, 0}) {
  DLTensor t{};
  t.data = const_cast<void*>(data);
  t.device = device;
  t.ndim = 2;
  t.dtype = dtype;
  t.shape = shape;
  return t;
}

}  // namespace nibble::sdk::host
