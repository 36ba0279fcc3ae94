// What a layer call does around the C++ forward: check the activations' dtypes, find or make the
// output (the caller's `out`, or a new tensor of x's library), and keep the tensors imported
// while the forward runs without the GIL.
#pragma once

#include <dlpack/dlpack.h>
#include <pybind11/pybind11.h>
#include <nibble/error.hpp>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "imported_tensor.hpp"
#include "row_view.hpp"

namespace nibble::python {

namespace py = pybind11;

/// Throw InvalidArgument unless `rows` (named `what`) is float32, bfloat16 or float16.
void require_float(const RowView& rows, const char* what);

/// A new uninitialised tensor [*leading, cols] of `dtype` from the library of `like`:
/// torch.Tensor in, torch.Tensor out; numpy.ndarray in, numpy.ndarray out; anything else, a
/// nibble.Tensor.
py::object new_output(py::handle like, std::span<const int64_t> leading, int64_t cols,
                      DLDataType dtype);

/// The output of a call on x: `out` when given (checked to be [*x's leading dimensions, cols] of
/// `dtype`), else a new_output() like x; imported and viewed as rows of `cols` elements.
class Output {
 public:
  Output(py::handle x, const RowView& x_rows, py::object out, int64_t cols, DLDataType dtype);
  /// The rows the forward writes.
  DLTensor& tensor() { return rows_->tensor(); }
  /// What the call returns: `out` itself, or the new tensor.
  py::object result() const { return object_; }

 private:
  py::object object_;
  std::optional<ImportedTensor> imported_;
  std::optional<RowView> rows_;
};

/// Throw `e` again with "layer <name>: " in front unless its message starts with "layer ".
[[noreturn]] void rethrow_naming_layer(const std::string& layer, const InvalidArgument& e);

/// Run `call`; an InvalidArgument from the checks around the forward gets "layer <name>: " in
/// front (the core's own messages start so already).
template <class F>
auto naming_layer(const std::string& layer, F&& call) {
  try {
    return call();
  } catch (const InvalidArgument& e) {
    rethrow_naming_layer(layer, e);
  }
}

/// The data pointers of the calling thread's last layer call, as the C++ forward got them: for
/// tests that check no tensor was copied on the way in.
struct LastCallPointers {
  uintptr_t x = 0;
  uintptr_t out = 0;
};
/// The calling thread's record.
LastCallPointers& last_call_pointers();
/// Record x and the output of a call about to run.
void record_call(const DLTensor& x, const DLTensor& out);

/// The data addresses of the tensors the calling thread's last linear_from_tensors,
/// moe_from_tensors or dense call handed to the C++ API, by the names its errors give them
/// ("qweight", "w13.scales", "router"): for tests that check no tensor was copied on the way in.
std::vector<std::pair<std::string, uintptr_t>>& last_build_pointers();

}  // namespace nibble::python
