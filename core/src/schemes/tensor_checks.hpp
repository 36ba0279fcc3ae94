// Checks shared by the schemes: every message names the file, the tensor, and expected vs found.
#pragma once

#include <nibble/checkpoint_scheme.hpp>
#include <nibble/error.hpp>
#include <nibble/sdk/numeric.hpp>
#include <nibble/untrusted_text.hpp>

#include <fmt/format.h>

#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#include "text/name_text.hpp"

namespace nibble::schemes {

/// "tensor 'NAME' in FILE", the name escaped (it comes from the file).
inline std::string where(const TensorView& t) {
  return fmt::format("tensor {} in {}", detail::name_text(t.name), t.file);
}

/// The layer's module name, escaped and quoted for messages.
inline std::string layer_name(const LayerTensors& layer) { return detail::name_text(layer.prefix); }

/// The tensor `prefix.suffix`, or an error saying it is missing for this layer.
inline const TensorView& require_tensor(const TensorView* t, const LayerTensors& layer,
                                        const char* suffix, std::string_view scheme) {
  if (t) return *t;
  std::vector<std::string> present;
  for (auto [name, p] : {std::pair{"qweight", layer.qweight},
                         {"qzeros", layer.qzeros},
                         {"scales", layer.scales},
                         {"g_idx", layer.g_idx},
                         {"bias", layer.bias}}) {
    if (p) present.push_back(name);
  }
  throw Error(fmt::format("tensor {} is missing for quantized layer {} ({}; present: {})",
                          detail::name_text(layer.prefix + "." + suffix), layer_name(layer), scheme,
                          fmt::join(present, "/")));
}

/// Throw unless `t` has one of `dtypes`.
inline void expect_dtype(const TensorView& t, std::initializer_list<DType> dtypes) {
  for (DType d : dtypes) {
    if (t.dtype == d) return;
  }
  std::vector<std::string_view> names;
  for (DType d : dtypes) names.push_back(safetensors_dtype_name(d));
  throw Error(fmt::format("{} has dtype {}, expected {}", where(t), safetensors_dtype_name(t.dtype),
                          fmt::join(names, " or ")));
}

/// Throw unless `t` has exactly `shape`; `why` explains where the expectation comes from.
inline void expect_shape(const TensorView& t, const std::vector<int64_t>& shape,
                         const std::string& why) {
  if (t.shape == shape) return;
  throw Error(fmt::format("{} has shape {}, expected [{}] ({})", where(t), t.shape_string(),
                          fmt::join(shape, ", "), why));
}

/// Throw unless `t` is 2-D.
inline void expect_rank2(const TensorView& t) {
  if (t.shape.size() != 2) {
    throw Error(fmt::format("{} has shape {}, expected a 2-D tensor", where(t), t.shape_string()));
  }
}

/// Throw unless the layer has at least one input and one output channel.
inline void expect_nonempty(const TensorView& t, int64_t K, int64_t N) {
  if (K <= 0 || N <= 0) {
    throw Error(fmt::format("{} has shape {}, which gives an empty layer (K = {}, N = {})",
                            where(t), t.shape_string(), K, N));
  }
}

/// Copy the raw bytes of a float tensor (scales, bias) without any rounding.
inline std::vector<uint8_t> raw_bytes(const TensorView& t) {
  std::vector<uint8_t> out(t.nbytes);
  if (t.nbytes) std::memcpy(out.data(), t.data, t.nbytes);
  return out;
}

/// A float tensor from canonical raw bytes.
inline OwnedTensor float_tensor(const std::vector<uint8_t>& bytes, DLDataType dtype,
                                std::vector<int64_t> shape) {
  OwnedTensor t;
  t.dtype = from_dlpack(dtype);
  t.shape = std::move(shape);
  t.data.resize(bytes.size());
  if (!bytes.empty()) std::memcpy(t.data.data(), bytes.data(), bytes.size());
  return t;
}

/// Throw unless qweight and qzeros are 2-D int32 words and scales a 2-D float tensor.
inline void expect_packed_tensors(const TensorView& qweight, const TensorView& qzeros,
                                  const TensorView& scales) {
  expect_dtype(qweight, {DType::I32});
  expect_rank2(qweight);
  expect_dtype(qzeros, {DType::I32});
  expect_rank2(qzeros);
  expect_dtype(scales, {DType::F16, DType::BF16, DType::F32});
  expect_rank2(scales);
}

/// Throw unless the optional bias is one float per output channel.
inline void check_bias(const LayerTensors& layer, int64_t N) {
  if (!layer.bias) return;
  expect_dtype(*layer.bias, {DType::F16, DType::BF16, DType::F32});
  expect_shape(*layer.bias, {N}, "one bias per output channel");
}

/// Check and copy the optional bias into `w`.
inline void decode_bias(const LayerTensors& layer, int64_t N, CanonicalWeight& w) {
  if (!layer.bias) return;
  check_bias(layer, N);
  w.bias = raw_bytes(*layer.bias);
  w.bias_dtype = to_dlpack(layer.bias->dtype);
}

/// Bytes on disk of every tensor of the layer.
inline uint64_t layer_bytes(const LayerTensors& layer) {
  uint64_t b = 0;
  for (const TensorView* t : {layer.qweight, layer.qzeros, layer.scales, layer.g_idx, layer.bias}) {
    if (t) b += t->nbytes;
  }
  return b;
}

}  // namespace nibble::schemes
