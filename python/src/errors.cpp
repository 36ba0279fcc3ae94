// nibble.Error and one subclass per kind of nibble::Error, with the C++ message unchanged.
// InvalidArgument is also a ValueError, so code that catches ValueError for bad arguments keeps
// working.
#include <nibble/error.hpp>

#include "bindings.hpp"

namespace nibble::python {

namespace {

// Made once at import; module attributes keep them alive.
PyObject* error_type = nullptr;
PyObject* invalid_argument_type = nullptr;
PyObject* unsupported_type = nullptr;
PyObject* unavailable_type = nullptr;
PyObject* checkpoint_error_type = nullptr;

PyObject* new_type(py::module_& m, const char* name, py::handle bases, const char* doc) {
  const std::string qualified = std::string("nibble.") + name;
  PyObject* type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases.ptr(), nullptr);
  if (!type) throw py::error_already_set();
  m.add_object(name, py::handle(type));
  return type;
}

}  // namespace

void bind_errors(py::module_& m) {
  error_type = new_type(m, "Error", PyExc_RuntimeError,
                        "A nibble failure; the message names the file, tensor, layer, plugin or "
                        "option involved and what was expected.");
  const py::handle error(error_type);
  invalid_argument_type = new_type(
      m, "InvalidArgument", py::make_tuple(error, py::handle(PyExc_ValueError)),
      "A tensor's type, shape, dtype, device or layout, an option, or a layer name is wrong.");
  unsupported_type = new_type(m, "Unsupported", error,
                              "No kernel of the selected backends runs this (valid) layer.");
  unavailable_type =
      new_type(m, "Unavailable", error, "The backend asked for is not loaded or cannot run here.");
  checkpoint_error_type =
      new_type(m, "CheckpointError", error,
               "A checkpoint's files are malformed, inconsistent or not of a supported format.");
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const InvalidArgument& e) {
      PyErr_SetString(invalid_argument_type, e.what());
    } catch (const Unsupported& e) {
      PyErr_SetString(unsupported_type, e.what());
    } catch (const Unavailable& e) {
      PyErr_SetString(unavailable_type, e.what());
    } catch (const CheckpointError& e) {
      PyErr_SetString(checkpoint_error_type, e.what());
    } catch (const Error& e) {
      PyErr_SetString(error_type, e.what());
    }
  });
}

}  // namespace nibble::python
