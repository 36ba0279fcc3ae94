#include "row_view.hpp"

#include <nibble/error.hpp>

#include <string>

#include "tensor_text.hpp"

namespace nibble::python {

namespace {

// The messages are built only when a check fails: a view is made on every call.
std::string layout_of(const char* what, const DLTensor& t) {
  return std::string(what) + " (shape " + shape_text(t.shape, t.ndim) + ", strides " +
         shape_text(t.strides, t.ndim) + ")";
}

constexpr const char* kPassContiguous =
    "pass a contiguous tensor (torch: .contiguous(), numpy: numpy.ascontiguousarray)";

}  // namespace

RowView::RowView(const DLTensor& t, const char* what, int64_t cols) {
  if (t.ndim < 1 || !t.shape)
    throw InvalidArgument(std::string(what) + " is a scalar; expected a tensor [..., " +
                          std::to_string(cols) + "]");
  if (t.ndim > kMaxDims)
    throw InvalidArgument(std::string(what) + " has " + std::to_string(t.ndim) +
                          " dimensions; nibble takes at most " + std::to_string(kMaxDims));
  const int last = t.ndim - 1;
  if (t.shape[last] != cols)
    throw InvalidArgument(std::string(what) + " has shape " + shape_text(t.shape, t.ndim) +
                          "; its last dimension must be " + std::to_string(cols));
  if (t.dtype.lanes != 1)
    throw InvalidArgument(std::string(what) + " has vector dtype " + dtype_text(t.dtype) +
                          "; expected one lane");
  int64_t rows = 1;
  for (int d = 0; d < last; ++d) {
    if (t.shape[d] < 0)
      throw InvalidArgument(std::string(what) +
                            " has a negative dimension: " + shape_text(t.shape, t.ndim));
    leading_[d] = t.shape[d];
    rows *= t.shape[d];
  }
  leading_count_ = last;
  // Strides in elements (DLPack's unit); none means a compact row-major tensor.
  int64_t row_stride = cols;
  if (t.strides && rows > 0) {
    if (cols > 1 && t.strides[last] != 1)
      throw InvalidArgument(layout_of(what, t) +
                            " does not hold its last dimension contiguously; " + kPassContiguous);
    // Dimensions of size 1 carry no stride; the others must nest, innermost first.
    int64_t inner_stride = -1, inner_size = 1;
    for (int d = last - 1; d >= 0; --d) {
      if (t.shape[d] == 1) continue;
      if (inner_stride < 0) {
        row_stride = t.strides[d];
      } else if (t.strides[d] != inner_stride * inner_size) {
        throw InvalidArgument(layout_of(what, t) +
                              " cannot be read as rows of one stride without a copy; " +
                              kPassContiguous);
      }
      inner_stride = t.strides[d];
      inner_size = t.shape[d];
    }
    if (rows > 1 && row_stride < 0)
      throw InvalidArgument(layout_of(what, t) + " runs its rows backwards (a negative stride); " +
                            kPassContiguous);
    if (rows > 1 && row_stride < cols)
      throw InvalidArgument(layout_of(what, t) + " has overlapping rows (row stride " +
                            std::to_string(row_stride) + " < " + std::to_string(cols) + ")");
  }
  shape_[0] = rows;
  shape_[1] = cols;
  strides_[0] = row_stride;
  strides_[1] = 1;
  view_.data = static_cast<char*>(t.data) + t.byte_offset;
  view_.device = t.device;
  view_.ndim = 2;
  view_.dtype = t.dtype;
  view_.shape = shape_;
  view_.strides = strides_;
  view_.byte_offset = 0;
}

}  // namespace nibble::python
