// The C++ baseline of bench/python_overhead.py: the same forward as LinearLayer.__call__, n times
// from C++ with the tensors imported once, so the difference per call is what Python adds. Also
// the introspection hooks the zero-copy tests read.
#include <nibble/runtime.hpp>

#include <chrono>

#include "bindings.hpp"
#include "layer_call.hpp"

namespace nibble::python {

void bind_bench(py::module_& m) {
  m.def(
      "_bench_cpp_loop",
      [](const LinearLayer& layer, py::handle x, py::handle out, int64_t n) {
        const ImportedTensor x_in = ImportedTensor::from(x, "x");
        RowView x_rows(x_in.tensor(), "x", layer.in_features());
        require_float(x_rows, "x");
        Output y(x, x_rows, py::reinterpret_borrow<py::object>(out), layer.out_features(),
                 x_rows.dtype());
        py::gil_scoped_release nogil;
        const auto start = std::chrono::steady_clock::now();
        for (int64_t i = 0; i < n; ++i) layer.forward(x_rows.tensor(), y.tensor());
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      },
      py::arg("layer"), py::arg("x"), py::arg("out"), py::arg("n"),
      "Seconds for n forwards of `layer` from x into out, called from C++ (a benchmark "
      "baseline).");
  m.def(
      "_last_call_pointers",
      [] {
        const LastCallPointers& p = last_call_pointers();
        return py::make_tuple(p.x, p.out);
      },
      "(x, out): the data addresses the calling thread's last layer call handed to the C++ "
      "forward (for tests: equal to the caller's tensors' data pointers when nothing was "
      "copied).");
  m.def(
      "_last_build_pointers",
      [] {
        py::dict d;
        for (const auto& [name, address] : last_build_pointers()) d[py::str(name)] = address;
        return d;
      },
      "{name: data address} of the tensors the calling thread's last linear_from_tensors, "
      "moe_from_tensors or dense call handed to the C++ API (for tests: equal to the caller's "
      "tensors' data pointers when nothing was copied).");
}

}  // namespace nibble::python
