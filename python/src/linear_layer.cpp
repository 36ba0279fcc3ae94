// nibble.LinearLayer: y = layer(x) for x [..., K] in, y [..., N] out, of x's dtype and library.
#include <nibble/placement_text.hpp>
#include <nibble/runtime.hpp>

#include "bindings.hpp"
#include "layer_call.hpp"
#include "python_text.hpp"

namespace nibble::python {

namespace {

py::object call_linear(const LinearLayer& layer, py::handle x, py::object out) {
  return naming_layer(layer.placement().layer, [&] {
    const ImportedTensor x_in = ImportedTensor::from(x, "x");
    RowView x_rows(x_in.tensor(), "x", layer.in_features());
    require_float(x_rows, "x");
    Output y(x, x_rows, std::move(out), layer.out_features(), x_rows.dtype());
    record_call(x_rows.tensor(), y.tensor());
    {
      // The imports keep both tensors alive; nothing below touches a Python object.
      py::gil_scoped_release nogil;
      layer.forward(x_rows.tensor(), y.tensor());
    }
    return y.result();
  });
}

}  // namespace

void bind_linear_layer(py::module_& m) {
  py::class_<LinearLayer>(m, "LinearLayer",
                          "A prepared linear layer (quantized or dense). Calls may run "
                          "concurrently from several threads; each releases the GIL.")
      .def("__call__", &call_linear, py::arg("x"), py::kw_only(), py::arg("out") = py::none(),
           "y[..., N] = x[..., K] @ W^T + b for float32, bfloat16 or float16 x in CPU memory. "
           "With out= (a tensor [..., N] of x's dtype), writes there and returns it; else "
           "returns a new tensor of x's library (torch, numpy; nibble.Tensor for others).")
      .def_property_readonly("in_features", &LinearLayer::in_features, "K")
      .def_property_readonly("out_features", &LinearLayer::out_features, "N")
      .def_property_readonly(
          "name", [](const LinearLayer& l) { return python_text(l.placement().layer); },
          "the checkpoint prefix (or the name it was given)")
      .def_property_readonly(
          "backend", [](const LinearLayer& l) { return python_text(l.placement().backend); },
          "the backend that runs it")
      .def_property_readonly(
          "kernel", [](const LinearLayer& l) { return python_text(l.placement().kernel); },
          "the kernel that runs it")
      .def_property_readonly("prepared_bytes", &LinearLayer::prepared_bytes,
                             "bytes the backend holds for the weight (0: not said)")
      .def(
          "explain",
          [](const LinearLayer& l) { return python_text(placement_text(l.placement())); },
          "Where it runs, the candidates passed over and why, and every kernel's verdict.")
      .def("__repr__", [](const LinearLayer& l) {
        const std::string text = placement_text(l.placement());
        return "nibble.LinearLayer(" + text.substr(0, text.find('\n')) +
               ", K=" + std::to_string(l.in_features()) +
               ", N=" + std::to_string(l.out_features()) + ")";
      });
}

}  // namespace nibble::python
