// A tensor [..., C] seen as the 2-D matrix [M, C] the C++ layers take: the leading dimensions
// fold into rows when their strides let them (any row stride, unit element stride), so no
// layout that would need a copy gets through. The view borrows the imported tensor's memory, and
// making one allocates nothing (it is on every call's path).
#pragma once

#include <dlpack/dlpack.h>

#include <cstdint>
#include <span>

namespace nibble::python {

class RowView {
 public:
  /// The most dimensions a tensor may have.
  static constexpr int kMaxDims = 8;

  /// View `t` (named `what` in errors) as rows of `cols` elements. Throws nibble::InvalidArgument
  /// for a 0-d tensor or one of more than kMaxDims dimensions, a last dimension other than
  /// `cols`, more than one lane, or a layout whose leading dimensions do not fold into one row
  /// stride.
  RowView(const DLTensor& t, const char* what, int64_t cols);
  RowView(const RowView&) = delete;  // tensor() points into the view itself
  RowView& operator=(const RowView&) = delete;

  /// The [M, C] tensor.
  DLTensor& tensor() { return view_; }
  /// The [M, C] tensor.
  const DLTensor& tensor() const { return view_; }
  /// M, the number of rows.
  int64_t rows() const { return shape_[0]; }
  /// The dimensions before the last.
  std::span<const int64_t> leading() const { return {leading_, size_t(leading_count_)}; }
  /// The dtype.
  DLDataType dtype() const { return view_.dtype; }

 private:
  DLTensor view_{};
  int64_t shape_[2] = {0, 0};
  int64_t strides_[2] = {0, 1};
  int64_t leading_[kMaxDims - 1] = {};
  int leading_count_ = 0;
};

}  // namespace nibble::python
