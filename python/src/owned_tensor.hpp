// nibble.Tensor: a CPU tensor whose memory the extension owns, exported by DLPack (so
// torch.from_dlpack and numpy.from_dlpack take it without a copy). Outputs come back in one
// when x is neither a torch.Tensor nor a numpy.ndarray, and it lets a program without numpy or
// torch make inputs.
#pragma once

#include <dlpack/dlpack.h>
#include <pybind11/pybind11.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace nibble::python {

namespace py = pybind11;

class OwnedTensor {
 public:
  /// A zero-filled tensor of `shape` and `dtype` ("float32", "bfloat16", "float16", "int32",
  /// "int64"); throws nibble::InvalidArgument for another dtype or a negative dimension.
  OwnedTensor(std::vector<int64_t> shape, const std::string& dtype);

  /// A new "dltensor" capsule over this memory; the memory lives until its consumer is done.
  py::capsule to_dlpack() const;
  const std::vector<int64_t>& shape() const { return shape_; }
  DLDataType dtype() const { return dtype_; }
  /// Number of elements.
  int64_t numel() const { return numel_; }
  /// Size in bytes.
  size_t nbytes() const { return size_t(numel_) * dtype_.bits / 8; }
  /// The memory.
  std::byte* data() const { return data_.get(); }

 private:
  std::vector<int64_t> shape_;
  DLDataType dtype_{};
  int64_t numel_ = 0;
  std::shared_ptr<std::byte[]> data_;
};

/// The DLPack dtype of a name OwnedTensor takes; throws nibble::InvalidArgument for others.
DLDataType parse_dtype(const std::string& name);

}  // namespace nibble::python
