// nibble._nibble, the compiled half of the Python package (nibble/__init__.py re-exports it).
#include "bindings.hpp"

PYBIND11_MODULE(_nibble, m) {
  using namespace nibble::python;
  m.doc() = "nibble: GPTQ/AWQ-quantized linear and MoE layers on pluggable backends";
  m.attr("__version__") = NIBBLE_VERSION;
  bind_errors(m);
  bind_owned_tensor(m);
  bind_checkpoint(m);
  bind_linear_layer(m);
  bind_moe_layer(m);
  bind_runtime(m);
  bind_bench(m);
}
