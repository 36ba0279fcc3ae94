#include "layer_call.hpp"

#include <nibble/error.hpp>
#include <nibble/sdk/numeric.hpp>
#include <nibble/untrusted_text.hpp>

#include <algorithm>
#include <string>

#include "tensor_text.hpp"

namespace nibble::python {

namespace {

// The bytes a row view spans, first to one past the last.
std::pair<uintptr_t, uintptr_t> span_of(const DLTensor& t) {
  const auto begin = reinterpret_cast<uintptr_t>(t.data);
  if (t.shape[0] == 0 || t.shape[1] == 0) return {begin, begin};
  const int64_t elements = (t.shape[0] - 1) * t.strides[0] + t.shape[1];
  return {begin, begin + uintptr_t(elements) * (t.dtype.bits / 8)};
}

}  // namespace

void require_float(const RowView& rows, const char* what) {
  if (!sdk::is_float_dtype(rows.dtype()))
    throw InvalidArgument(std::string(what) + " has dtype " + dtype_text(rows.dtype()) +
                          "; expected float32, bfloat16 or float16");
}

py::object new_output(py::handle like, std::span<const int64_t> leading, int64_t cols,
                      DLDataType dtype) {
  // The choice of library is made in Python (nibble/_outputs.py), where it reads plainly; looked
  // up once and kept for the life of the process.
  static py::handle make =
      py::object(py::module_::import("nibble._outputs").attr("new_output")).release();
  py::tuple dims(leading.size() + 1);
  for (size_t i = 0; i < leading.size(); ++i) dims[i] = py::int_(leading[i]);
  dims[leading.size()] = py::int_(cols);
  return make(like, dims, dtype_text(dtype));
}

Output::Output(py::handle x, const RowView& x_rows, py::object out, int64_t cols,
               DLDataType dtype) {
  object_ = out.is_none() ? new_output(x, x_rows.leading(), cols, dtype) : std::move(out);
  imported_.emplace(ImportedTensor::from(object_, "out", true));
  rows_.emplace(imported_->tensor(), "out", cols);
  const std::span<const int64_t> want = x_rows.leading(), got = rows_->leading();
  if (!std::equal(want.begin(), want.end(), got.begin(), got.end()))
    throw InvalidArgument("out has shape " + shape_text(got, cols) + "; expected " +
                          shape_text(want, cols));
  if (!sdk::same_dtype(rows_->dtype(), dtype))
    throw InvalidArgument("out has dtype " + dtype_text(rows_->dtype()) + "; expected " +
                          dtype_text(dtype) + " (x's)");
  const auto [xb, xe] = span_of(x_rows.tensor());
  const auto [ob, oe] = span_of(rows_->tensor());
  if (xb < oe && ob < xe)
    throw InvalidArgument("out overlaps x in memory; a layer cannot write over its input");
}

void rethrow_naming_layer(const std::string& layer, const InvalidArgument& e) {
  const std::string message = e.what();
  if (message.rfind("layer ", 0) == 0) throw e;
  throw InvalidArgument("layer " + escape_untrusted(layer, 256) + ": " + message);
}

LastCallPointers& last_call_pointers() {
  thread_local LastCallPointers pointers;
  return pointers;
}

void record_call(const DLTensor& x, const DLTensor& out) {
  LastCallPointers& p = last_call_pointers();
  p.x = reinterpret_cast<uintptr_t>(x.data);
  p.out = reinterpret_cast<uintptr_t>(out.data);
}

std::vector<std::pair<std::string, uintptr_t>>& last_build_pointers() {
  thread_local std::vector<std::pair<std::string, uintptr_t>> pointers;
  return pointers;
}

}  // namespace nibble::python
