// Tensors in from Python, never copied: by DLPack, an object's __dlpack__() (torch.Tensor,
// nibble.Tensor, or any other producer) or a legacy "dltensor" capsule
// (torch.utils.dlpack.to_dlpack); a numpy.ndarray by the buffer protocol, which unlike numpy's
// DLPack export takes read-only arrays. The import owns a DLManagedTensor (the producer's, or one
// holding the buffer), so the memory stays valid while a forward runs with the GIL released.
#pragma once

#include <dlpack/dlpack.h>
#include <pybind11/pybind11.h>

namespace nibble::python {

namespace py = pybind11;

class ImportedTensor {
 public:
  /// Import `obj`, named `what` in errors ("x", "out", ...), to be read or, when `written`,
  /// written. A device that the CPU cannot address is refused (from __dlpack_device__ where the
  /// producer has one, before anything is exported). torch.Tensor and torch.nn.Parameter are
  /// exported with torch's own to_dlpack (what Tensor.__dlpack__ calls, without its Python-level
  /// cost). A numpy.ndarray is taken by the buffer protocol: read-only is fine unless `written`.
  /// Throws nibble::InvalidArgument.
  static ImportedTensor from(py::handle obj, const char* what, bool written = false);
  ImportedTensor(ImportedTensor&& other) noexcept : managed_(other.managed_) {
    other.managed_ = nullptr;
  }
  ImportedTensor(const ImportedTensor&) = delete;
  ImportedTensor& operator=(const ImportedTensor&) = delete;
  ImportedTensor& operator=(ImportedTensor&&) = delete;
  /// Hands the tensor back to its producer; the GIL must be held (numpy's deleter and the
  /// buffer release need it).
  ~ImportedTensor();

  /// The tensor as the producer described it.
  const DLTensor& tensor() const { return managed_->dl_tensor; }

 private:
  explicit ImportedTensor(DLManagedTensor* managed) : managed_(managed) {}
  DLManagedTensor* managed_;
};

}  // namespace nibble::python
