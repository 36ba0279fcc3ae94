// The fixtures' io.safetensors tensors as reference material: inputs as activations and stored
// outputs as float64 values. Header-only; needs libnibble's safetensors reader beside the SDK.
#pragma once

#include <nibble/safetensors.hpp>

#include <nibble/conformance/reference.hpp>

#include <vector>

namespace nibble::conformance {

/// A [M][K] tensor of an io file as activations of `dtype` (its values are exact in that dtype).
inline Activations activations_of(const TensorView& t, DLDataType dtype) {
  Activations a;
  a.M = t.shape.at(0);
  a.K = t.shape.at(1);
  a.dtype = dtype;
  a.bytes.resize(size_t(a.M * a.K) * sdk::dtype_bytes(dtype));
  a.values.resize(size_t(a.M * a.K));
  for (size_t i = 0; i < a.values.size(); ++i) {
    a.values[i] = t.as_double(i);
    sdk::store_float(a.bytes.data(), dtype, i, float(a.values[i]));
  }
  return a;
}

/// Every element of a tensor as float64, in storage order.
inline std::vector<double> values_of(const TensorView& t) {
  std::vector<double> v(size_t(t.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = t.as_double(i);
  return v;
}

}  // namespace nibble::conformance
