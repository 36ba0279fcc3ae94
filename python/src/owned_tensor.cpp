#include "owned_tensor.hpp"

#include <nibble/error.hpp>
#include <nibble/sdk/numeric.hpp>

#include <pybind11/stl.h>

#include <cstring>
#include <limits>

#include "bindings.hpp"
#include "tensor_text.hpp"

namespace nibble::python {

namespace {

// What a consumer holds: the DLPack struct and a share of the memory.
struct Export {
  DLManagedTensor managed{};
  std::shared_ptr<std::byte[]> data;
  std::vector<int64_t> shape;
};

void delete_export(DLManagedTensor* m) { delete static_cast<Export*>(m->manager_ctx); }

// An unconsumed capsule frees its tensor itself (the DLPack protocol).
void release_capsule(PyObject* capsule) {
  if (!PyCapsule_IsValid(capsule, "dltensor")) return;
  auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
  if (m && m->deleter) m->deleter(m);
}

// Element i of `t` as a Python number.
py::object element(const OwnedTensor& t, int64_t i) {
  const DLDataType d = t.dtype();
  if (d.code == kDLInt && d.bits == 32) {
    int32_t v;
    std::memcpy(&v, t.data() + i * 4, 4);
    return py::int_(v);
  }
  if (d.code == kDLInt && d.bits == 64) {
    int64_t v;
    std::memcpy(&v, t.data() + i * 8, 8);
    return py::int_(v);
  }
  return py::float_(sdk::load_float(t.data(), d, size_t(i)));
}

py::object nested_list(const OwnedTensor& t, size_t dim, int64_t& next) {
  if (dim == t.shape().size()) return element(t, next++);
  py::list out;
  for (int64_t i = 0; i < t.shape()[dim]; ++i) out.append(nested_list(t, dim + 1, next));
  return out;
}

}  // namespace

DLDataType parse_dtype(const std::string& name) {
  if (name == "float32") return DLDataType{kDLFloat, 32, 1};
  if (name == "float16") return DLDataType{kDLFloat, 16, 1};
  if (name == "bfloat16") return DLDataType{kDLBfloat, 16, 1};
  if (name == "int32") return DLDataType{kDLInt, 32, 1};
  if (name == "int64") return DLDataType{kDLInt, 64, 1};
  throw InvalidArgument("dtype " + name +
                        " is not one of float32, bfloat16, float16, int32, int64");
}

OwnedTensor::OwnedTensor(std::vector<int64_t> shape, const std::string& dtype)
    : shape_(std::move(shape)), dtype_(parse_dtype(dtype)) {
  numel_ = 1;
  for (int64_t d : shape_) {
    if (d < 0) throw InvalidArgument("nibble.Tensor: negative dimension in " + shape_text(shape_));
    if (d > 0 && numel_ > std::numeric_limits<int64_t>::max() / 8 / d)
      throw InvalidArgument("nibble.Tensor: shape " + shape_text(shape_) + " is too large");
    numel_ *= d;
  }
  data_ = std::shared_ptr<std::byte[]>(new std::byte[std::max<size_t>(nbytes(), 1)]());
}

py::capsule OwnedTensor::to_dlpack() const {
  auto* e = new Export;
  e->data = data_;
  e->shape = shape_;
  DLTensor& t = e->managed.dl_tensor;
  t.data = data_.get();
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = int(shape_.size());
  t.dtype = dtype_;
  t.shape = e->shape.data();
  t.strides = nullptr;  // compact, row-major
  t.byte_offset = 0;
  e->managed.manager_ctx = e;
  e->managed.deleter = &delete_export;
  return py::capsule(&e->managed, "dltensor", &release_capsule);
}

void bind_owned_tensor(py::module_& m) {
  py::class_<OwnedTensor>(m, "Tensor",
                          "A CPU tensor owned by nibble, exported by DLPack: torch.from_dlpack(t) "
                          "and numpy.from_dlpack(t) share its memory.")
      .def(py::init([](std::vector<int64_t> shape, const std::string& dtype, py::object data) {
             OwnedTensor t(std::move(shape), dtype);
             if (!data.is_none()) {
               Py_buffer view;
               if (PyObject_GetBuffer(data.ptr(), &view, PyBUF_C_CONTIGUOUS) != 0) {
                 PyErr_Clear();
                 throw InvalidArgument(
                     "nibble.Tensor: data must be a C-contiguous buffer (bytes, bytearray, "
                     "array.array, memoryview)");
               }
               const size_t bytes = size_t(view.len);
               if (bytes == t.nbytes()) std::memcpy(t.data(), view.buf, bytes);
               PyBuffer_Release(&view);
               if (bytes != t.nbytes())
                 throw InvalidArgument("nibble.Tensor: data holds " + std::to_string(bytes) +
                                       " bytes; shape " + shape_text(t.shape()) + " of " + dtype +
                                       " needs " + std::to_string(t.nbytes()));
             }
             return t;
           }),
           py::arg("shape"), py::arg("dtype") = "float32", py::arg("data") = py::none(),
           "A zero-filled tensor, or one holding a copy of `data` (any buffer of the exact "
           "size, e.g. array.array('f', values) for float32).")
      .def_property_readonly("shape",
                             [](const OwnedTensor& t) { return py::tuple(py::cast(t.shape())); })
      .def_property_readonly("dtype", [](const OwnedTensor& t) { return dtype_text(t.dtype()); })
      .def_property_readonly("nbytes", &OwnedTensor::nbytes)
      .def(
          "__dlpack__", [](const OwnedTensor& t, py::object) { return t.to_dlpack(); },
          py::arg("stream") = py::none())
      .def("__dlpack_device__", [](const OwnedTensor&) { return py::make_tuple(int(kDLCPU), 0); })
      .def("tobytes",
           [](const OwnedTensor& t) {
             return py::bytes(reinterpret_cast<const char*>(t.data()), t.nbytes());
           })
      .def("tolist",
           [](const OwnedTensor& t) {
             int64_t next = 0;
             return nested_list(t, 0, next);
           })
      .def("__repr__", [](const OwnedTensor& t) {
        return "nibble.Tensor(shape=" + shape_text(t.shape()) + ", dtype=" + dtype_text(t.dtype()) +
               ")";
      });
}

}  // namespace nibble::python
