// DLPack tensors an engine lends, seen as the TensorViews the schemes read: the one place where a
// DLTensor's device, dtype, strides and offset are checked before its bytes are read.
#pragma once

#include <nibble/safetensors.hpp>

#include <dlpack/dlpack.h>

#include <cstdint>
#include <string>

namespace nibble::detail {

/// A view of `t` named `name` (the label `file` stands for the file in messages, already
/// escaped). Throws nibble::Error naming the tensor unless `t` is in CPU memory, row-major
/// contiguous, of a safetensors dtype (f16/bf16/f32/f64, int8/16/32/64, uint8) with one lane,
/// at a byte offset that is a whole number of elements, and non-null when it has elements.
TensorView dlpack_view(const DLTensor& t, const std::string& name, const std::string& file);

/// Sub-tensor `index` along the first dimension of `stacked` (rank >= 2), named `name`.
TensorView first_dim_slice(const TensorView& stacked, int64_t index, const std::string& name);

}  // namespace nibble::detail
