#include "row_view.hpp"

#include <nibble/error.hpp>

#include <string>

#include "tensor_text.hpp"

namespace nibble::python {

RowView::RowView(const DLTensor& t, const char* what, int64_t cols) {
  const std::string name(what);
  if (t.ndim < 1 || !t.shape)
    throw InvalidArgument(name + " is a scalar; expected a tensor [..., " + std::to_string(cols) +
                          "]");
  const int last = t.ndim - 1;
  const std::string shape = shape_text(t.shape, t.ndim);
  if (t.shape[last] != cols)
    throw InvalidArgument(name + " has shape " + shape + "; its last dimension must be " +
                          std::to_string(cols));
  if (t.dtype.lanes != 1)
    throw InvalidArgument(name + " has vector dtype " + dtype_text(t.dtype) +
                          "; expected one lane");
  leading_.assign(t.shape, t.shape + last);
  int64_t rows = 1;
  for (int64_t d : leading_) {
    if (d < 0) throw InvalidArgument(name + " has a negative dimension: " + shape);
    rows *= d;
  }
  // Strides in elements (DLPack's unit); none means a compact row-major tensor.
  int64_t row_stride = cols;
  if (t.strides && rows > 0) {
    const std::string layout =
        name + " (shape " + shape + ", strides " + shape_text(t.strides, t.ndim) + ")";
    if (cols > 1 && t.strides[last] != 1)
      throw InvalidArgument(layout +
                            " does not hold its last dimension contiguously; pass a contiguous "
                            "tensor (torch: .contiguous(), numpy: numpy.ascontiguousarray)");
    // Dimensions of size 1 carry no stride; the others must nest, innermost first.
    int64_t inner_stride = -1, inner_size = 1;
    for (int d = last - 1; d >= 0; --d) {
      if (t.shape[d] == 1) continue;
      if (inner_stride < 0) {
        row_stride = inner_stride = t.strides[d];
      } else if (t.strides[d] != inner_stride * inner_size) {
        throw InvalidArgument(layout +
                              " cannot be read as rows of one stride without a copy; pass a "
                              "contiguous tensor (torch: .contiguous(), numpy: "
                              "numpy.ascontiguousarray)");
      } else {
        inner_stride = t.strides[d];
      }
      inner_size = t.shape[d];
    }
    if (rows > 1 && row_stride < 0)
      throw InvalidArgument(layout +
                            " runs its rows backwards (a negative stride); pass a "
                            "contiguous tensor");
    if (rows > 1 && row_stride < cols)
      throw InvalidArgument(layout + " has overlapping rows (row stride " +
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
