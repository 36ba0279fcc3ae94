// The parts of the extension module nibble._nibble, one per file; module.cpp calls them in order.
#pragma once

#include <pybind11/pybind11.h>
#include <nibble/runtime.hpp>

namespace nibble::python {

namespace py = pybind11;

/// nibble.Error and its subclasses, and the translation of C++ exceptions into them.
void bind_errors(py::module_& m);
/// nibble.Tensor, the DLPack-exporting buffer outputs are returned in when x is neither a
/// torch.Tensor nor a numpy.ndarray.
void bind_owned_tensor(py::module_& m);
/// nibble.Checkpoint, nibble.LayerInfo, nibble.MoeInfo.
void bind_checkpoint(py::module_& m);
/// nibble.LinearLayer.
void bind_linear_layer(py::module_& m);
/// nibble.MoeLayer.
void bind_moe_layer(py::module_& m);
/// nibble.Runtime.
void bind_runtime(py::module_& m);
/// Runtime.linear_from_tensors, Runtime.moe_from_tensors and Runtime.dense.
void bind_layers_from_tensors(py::class_<Runtime>& runtime);
/// nibble._bench_cpp_loop, the C++ baseline of bench/python_overhead.py.
void bind_bench(py::module_& m);

}  // namespace nibble::python
