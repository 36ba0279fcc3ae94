#include "imported_tensor.hpp"

#include <nibble/error.hpp>
#include <nibble/sdk/device.hpp>

#include <string>

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
