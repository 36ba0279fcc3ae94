#include "imported_tensor.hpp"

#include <nibble/error.hpp>
#include <nibble/sdk/device.hpp>

#include <bit>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tensor_text.hpp"

namespace nibble::python {

namespace {

std::string type_name(py::handle obj) {
  return py::str(py::type::handle_of(obj).attr("__qualname__")).cast<std::string>();
}

// Take ownership of a capsule's tensor: the protocol renames a consumed capsule, so its
// destructor leaves the tensor to us and no second consumer can take it.
DLManagedTensor* consume(py::handle capsule, const char* what) {
  PyObject* c = capsule.ptr();
  if (!PyCapsule_IsValid(c, "dltensor")) {
    const char* name = PyCapsule_GetName(c);
    PyErr_Clear();
    if (name && std::string(name) == "used_dltensor")
      throw InvalidArgument(std::string(what) +
                            ": this DLPack capsule was already consumed; a capsule can be "
                            "passed once (pass the tensor itself instead)");
    throw InvalidArgument(std::string(what) + ": expected a DLPack capsule named \"dltensor\"");
  }
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(c, "dltensor"));
  if (!managed || PyCapsule_SetName(c, "used_dltensor") != 0) {
    PyErr_Clear();
    throw InvalidArgument(std::string(what) + ": its DLPack capsule holds no tensor");
  }
  return managed;
}

[[noreturn]] void throw_not_cpu(const char* what, DLDevice device) {
  throw InvalidArgument(std::string(what) + " is on " + device_text(device) +
                        "; nibble's layers read and write CPU memory (cpu, cuda_host, "
                        "rocm_host): move it first (torch: .cpu())");
}

// The producer's own exception ("TypeError: ..."), without pybind11's traceback, for a
// __dlpack__ or __dlpack_device__ that raised; the Python error is cleared when `e` goes.
std::string producer_message(const py::error_already_set& e) {
  std::string type = "Exception";
  if (e.type()) type = py::str(e.type().attr("__name__"));
  return type + ": " + std::string(py::str(e.value()));
}

// torch's own export, for torch.Tensor and torch.nn.Parameter exactly: Tensor.__dlpack__ and
// __dlpack_device__ are Python functions around it that cost some 8 us a tensor in torch 1.13, more
// than a small layer's forward. Subclasses (which may override how they export) take the protocol.
// torch is looked up in sys.modules only, never imported, and kept once found.
py::handle torch_to_dlpack(py::handle obj) {
  static PyObject* tensor_type = nullptr;
  static PyObject* parameter_type = nullptr;
  static PyObject* to_dlpack = nullptr;
  if (!to_dlpack) {
    PyObject* torch = PyDict_GetItemString(PySys_GetObject("modules"), "torch");
    if (!torch || torch == Py_None) return {};
    py::object t = py::reinterpret_borrow<py::object>(torch);
    py::object exporter = py::getattr(py::getattr(t, "_C", py::none()), "_to_dlpack", py::none());
    if (exporter.is_none()) return {};
    tensor_type = py::object(t.attr("Tensor")).release().ptr();
    parameter_type = py::object(t.attr("nn").attr("Parameter")).release().ptr();
    to_dlpack = exporter.release().ptr();
  }
  PyObject* type = reinterpret_cast<PyObject*>(Py_TYPE(obj.ptr()));
  return type == tensor_type || type == parameter_type ? py::handle(to_dlpack) : py::handle();
}

// numpy.ndarray, and the subclasses that keep its export (numpy.memmap, numpy.matrix): numpy is
// looked up in sys.modules only, never imported, and its type kept once found. A subclass that
// defines its own __dlpack__ takes the protocol, as torch's subclasses do.
bool is_numpy_array(py::handle obj) {
  static PyTypeObject* ndarray = nullptr;
  static PyObject* ndarray_dlpack = nullptr;
  if (!ndarray) {
    PyObject* numpy = PyDict_GetItemString(PySys_GetObject("modules"), "numpy");
    if (!numpy || numpy == Py_None) return false;
    py::object type = py::getattr(numpy, "ndarray", py::none());
    if (!PyType_Check(type.ptr())) return false;
    ndarray_dlpack = py::getattr(type, "__dlpack__", py::none()).release().ptr();
    ndarray = reinterpret_cast<PyTypeObject*>(type.release().ptr());
  }
  PyTypeObject* type = Py_TYPE(obj.ptr());
  if (type == ndarray) return true;
  if (!PyType_IsSubtype(type, ndarray)) return false;
  return py::getattr(py::handle(reinterpret_cast<PyObject*>(type)), "__dlpack__", py::none())
      .is(py::handle(ndarray_dlpack));
}

// The DLPack type of a buffer's element (its struct-module format and size), as numpy's own
// DLPack export types the same dtypes; none for what DLPack cannot describe (bool, another byte
// order, records).
std::optional<DLDataType> buffer_dtype(const char* format, Py_ssize_t itemsize) {
  std::string_view f = format ? format : "B";
  const char native = std::endian::native == std::endian::little ? '<' : '>';
  if (!f.empty() && (f[0] == '@' || f[0] == '=' || f[0] == native)) f.remove_prefix(1);
  if (itemsize <= 0 || itemsize > 16) return std::nullopt;
  const auto bits = uint8_t(itemsize * 8);
  if (f.size() == 1 && std::string_view("efdg").find(f[0]) != std::string_view::npos)
    return DLDataType{kDLFloat, bits, 1};
  if (f.size() == 1 && std::string_view("bhilqn").find(f[0]) != std::string_view::npos)
    return DLDataType{kDLInt, bits, 1};
  if (f.size() == 1 && std::string_view("BHILQN").find(f[0]) != std::string_view::npos)
    return DLDataType{kDLUInt, bits, 1};
  if (f.size() == 2 && f[0] == 'Z' && (f[1] == 'f' || f[1] == 'd'))
    return DLDataType{kDLComplex, bits, 1};
  return std::nullopt;
}

// What a buffer import's managed tensor holds: the buffer (and through it the array) and the
// shape and strides in DLPack's units.
struct BufferExport {
  DLManagedTensor managed{};
  Py_buffer view{};  // obj stays null until the buffer is taken, so the release is always right
  std::vector<int64_t> shape, strides;
  ~BufferExport() { PyBuffer_Release(&view); }
};

void delete_buffer_export(DLManagedTensor* m) { delete static_cast<BufferExport*>(m->manager_ctx); }

// A numpy array by the buffer protocol rather than by its __dlpack__, which numpy 1.24 refuses for
// read-only arrays (np.frombuffer over bytes, a memmap opened "r"): the buffer protocol says
// read-only with a flag, so an input the layers only read is taken where it lies, and an output is
// refused by name.
DLManagedTensor* import_numpy(py::handle obj, const char* what, bool written) {
  auto e = std::make_unique<BufferExport>();
  if (PyObject_GetBuffer(obj.ptr(), &e->view, written ? PyBUF_RECORDS : PyBUF_RECORDS_RO) != 0) {
    const py::error_already_set error;
    if (written && !py::getattr(obj, "flags").attr("writeable").cast<bool>())
      throw InvalidArgument(std::string(what) +
                            " is a read-only numpy array; nibble writes the output there: pass a "
                            "writable array (numpy.empty, or a .copy())");
    throw InvalidArgument(std::string(what) + " (numpy dtype " +
                          std::string(py::str(py::getattr(obj, "dtype"))) +
                          "): numpy's buffer export failed: " + producer_message(error));
  }
  const Py_buffer& v = e->view;
  const std::optional<DLDataType> dtype = buffer_dtype(v.format, v.itemsize);
  if (!dtype)
    throw InvalidArgument(std::string(what) + " has numpy dtype " +
                          std::string(py::str(py::getattr(obj, "dtype"))) +
                          ", which DLPack has no type for (nibble takes integers and floats in "
                          "native byte order)");
  e->shape.assign(v.shape, v.shape + v.ndim);
  e->strides.resize(size_t(v.ndim));
  for (int d = 0; d < v.ndim; ++d) {
    // DLPack counts strides in elements; a field of a record array steps by the record instead.
    if (v.strides[d] % v.itemsize != 0)
      throw InvalidArgument(std::string(what) + " (shape " + shape_text(e->shape) +
                            ", byte strides " +
                            shape_text(std::vector<int64_t>(v.strides, v.strides + v.ndim)) +
                            ") does not step by whole elements of " + std::to_string(v.itemsize) +
                            " bytes; pass a contiguous array (numpy.ascontiguousarray)");
    e->strides[d] = v.strides[d] / v.itemsize;
  }
  DLTensor& t = e->managed.dl_tensor;
  t.data = v.buf;
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = v.ndim;
  t.dtype = *dtype;
  t.shape = e->shape.data();
  t.strides = e->strides.data();
  t.byte_offset = 0;
  e->managed.manager_ctx = e.get();
  e->managed.deleter = &delete_buffer_export;
  return &e.release()->managed;
}

}  // namespace

ImportedTensor ImportedTensor::from(py::handle obj, const char* what, bool written) {
  if (PyCapsule_CheckExact(obj.ptr())) return ImportedTensor(consume(obj, what));
  if (py::handle export_torch = torch_to_dlpack(obj)) {
    // Reading a tensor that requires grad is reading it detached (nibble computes no gradients);
    // writing one would go behind autograd's back, which Tensor.__dlpack__ refuses too.
    if (written && py::getattr(obj, "requires_grad").cast<bool>())
      throw InvalidArgument(std::string(what) +
                            " requires grad; nibble writes its output outside autograd: pass a "
                            "tensor that does not require grad");
    py::object capsule;
    try {
      capsule = export_torch(obj);
    } catch (const py::error_already_set& e) {
      throw InvalidArgument(std::string(what) +
                            ": torch's to_dlpack failed: " + producer_message(e));
    }
    ImportedTensor imported(consume(capsule, what));
    const DLDevice device = imported.tensor().device;
    if (!sdk::is_cpu_memory(device)) throw_not_cpu(what, device);
    return imported;
  }
  if (is_numpy_array(obj)) return ImportedTensor(import_numpy(obj, what, written));
  py::object export_fn = py::getattr(obj, "__dlpack__", py::none());
  if (export_fn.is_none())
    throw InvalidArgument(std::string(what) +
                          ": expected a tensor (torch.Tensor, numpy.ndarray, nibble.Tensor or "
                          "any object with __dlpack__) or a DLPack capsule; got " +
                          type_name(obj));
  py::object device_fn = py::getattr(obj, "__dlpack_device__", py::none());
  if (!device_fn.is_none()) {
    DLDevice device{};
    try {
      py::tuple d = device_fn();
      device = DLDevice{DLDeviceType(d[0].cast<int>()), d[1].cast<int>()};
    } catch (const py::error_already_set& e) {
      throw InvalidArgument(std::string(what) +
                            ": its __dlpack_device__() failed: " + producer_message(e));
    } catch (const py::cast_error&) {
      throw InvalidArgument(std::string(what) +
                            ": its __dlpack_device__() did not return (device_type, device_id)");
    }
    if (!sdk::is_cpu_memory(device)) throw_not_cpu(what, device);
  }
  py::object capsule;
  try {
    capsule = export_fn();
  } catch (const py::error_already_set& e) {
    throw InvalidArgument(std::string(what) + ": its __dlpack__() failed: " + producer_message(e));
  }
  if (!PyCapsule_CheckExact(capsule.ptr()))
    throw InvalidArgument(std::string(what) + ": its __dlpack__() returned a " +
                          type_name(capsule) + ", not a DLPack capsule");
  return ImportedTensor(consume(capsule, what));
}

ImportedTensor::~ImportedTensor() {
  if (managed_ && managed_->deleter) managed_->deleter(managed_);
}

}  // namespace nibble::python
