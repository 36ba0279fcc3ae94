// nibble.MoeLayer: y = moe(x) routes with the checkpoint's router; moe.experts(x, ids, weights)
// takes the routing an engine computed. x [..., K] in, y [..., K] out, of x's dtype and library.
#include <nibble/error.hpp>
#include <nibble/placement_text.hpp>
#include <nibble/runtime.hpp>
#include <nibble/sdk/host/matrix.hpp>
#include <nibble/sdk/numeric.hpp>

#include <algorithm>
#include <cstring>

#include "bindings.hpp"
#include "layer_call.hpp"
#include "python_text.hpp"
#include "tensor_text.hpp"

namespace nibble::python {

namespace {

// A routing tensor [..., top_k] whose leading dimensions match x's.
void check_routing(const RowView& r, const RowView& x, const char* what, int top_k) {
  const std::span<const int64_t> want = x.leading(), got = r.leading();
  if (!std::equal(want.begin(), want.end(), got.begin(), got.end()))
    throw InvalidArgument(std::string(what) + " has shape " + shape_text(got, top_k) +
                          "; expected " + shape_text(want, top_k) +
                          " (x's leading dimensions, top_k)");
}

py::object call_moe(const MoeLayer& moe, py::handle x, py::object out) {
  return naming_layer(moe.placements().back().layer, [&] {
    const ImportedTensor x_in = ImportedTensor::from(x, "x");
    RowView x_rows(x_in.tensor(), "x", moe.hidden());
    require_float(x_rows, "x");
    Output y(x, x_rows, std::move(out), moe.hidden(), x_rows.dtype());
    record_call(x_rows.tensor(), y.tensor());
    {
      py::gil_scoped_release nogil;
      moe.forward(x_rows.tensor(), y.tensor());
    }
    return y.result();
  });
}

py::object call_experts(const MoeLayer& moe, py::handle x, py::handle topk_ids,
                        py::handle topk_weights, py::object out) {
  return naming_layer(moe.placements().back().layer, [&] {
    const ImportedTensor x_in = ImportedTensor::from(x, "x");
    RowView x_rows(x_in.tensor(), "x", moe.hidden());
    require_float(x_rows, "x");
    const ImportedTensor ids_in = ImportedTensor::from(topk_ids, "topk_ids");
    RowView ids(ids_in.tensor(), "topk_ids", moe.top_k());
    check_routing(ids, x_rows, "topk_ids", moe.top_k());
    if (ids.dtype().code != kDLInt || (ids.dtype().bits != 32 && ids.dtype().bits != 64))
      throw InvalidArgument("topk_ids has dtype " + dtype_text(ids.dtype()) +
                            "; expected int32 or int64 (-1: no expert)");
    const ImportedTensor weights_in = ImportedTensor::from(topk_weights, "topk_weights");
    RowView weights(weights_in.tensor(), "topk_weights", moe.top_k());
    check_routing(weights, x_rows, "topk_weights", moe.top_k());
    require_float(weights, "topk_weights");
    Output y(x, x_rows, std::move(out), moe.hidden(), x_rows.dtype());
    record_call(x_rows.tensor(), y.tensor());
    {
      py::gil_scoped_release nogil;
      moe.forward_routed(x_rows.tensor(), ids.tensor(), weights.tensor(), y.tensor());
    }
    return y.result();
  });
}

// The router's choice for x: (topk_ids int32, topk_weights float32), each [..., top_k], in x's
// library.
py::tuple call_route(const MoeLayer& moe, py::handle x) {
  return naming_layer(moe.placements().back().layer, [&] {
    const ImportedTensor x_in = ImportedTensor::from(x, "x");
    RowView x_rows(x_in.tensor(), "x", moe.hidden());
    require_float(x_rows, "x");
    std::vector<int32_t> ids;
    std::vector<float> weights;
    {
      py::gil_scoped_release nogil;
      moe.route(x_rows.tensor(), ids, weights);
    }
    py::object ids_out = new_output(x, x_rows.leading(), moe.top_k(), sdk::dtype_i32());
    py::object weights_out = new_output(x, x_rows.leading(), moe.top_k(), sdk::dtype_f32());
    for (auto [object, source, bytes] :
         {std::tuple{&ids_out, static_cast<const void*>(ids.data()), ids.size() * 4},
          std::tuple{&weights_out, static_cast<const void*>(weights.data()), weights.size() * 4}}) {
      const ImportedTensor t = ImportedTensor::from(*object, "route output", true);
      if (bytes)
        std::memcpy(static_cast<char*>(t.tensor().data) + t.tensor().byte_offset, source, bytes);
    }
    return py::make_tuple(ids_out, weights_out);
  });
}

std::string explain_moe(const MoeLayer& moe) {
  std::string text;
  for (const Placement& p : moe.placements()) text += placement_text(p);
  return text;
}

}  // namespace

void bind_moe_layer(py::module_& m) {
  py::class_<MoeLayer>(m, "MoeLayer",
                       "A prepared MoE block: its router (a dense layer) and its experts. Calls "
                       "may run concurrently from several threads; each releases the GIL.")
      .def("__call__", &call_moe, py::arg("x"), py::kw_only(), py::arg("out") = py::none(),
           "Route with the block's router and run the experts: y[..., K] for x[..., K].")
      .def("experts", &call_experts, py::arg("x"), py::arg("topk_ids"), py::arg("topk_weights"),
           py::kw_only(), py::arg("out") = py::none(),
           "Run the experts with routing given by the caller: topk_ids [..., top_k] int32/int64 "
           "(-1: no expert), topk_weights [..., top_k] float32/bfloat16/float16.")
      .def("route", &call_route, py::arg("x"),
           "The router's choice: (topk_ids int32, topk_weights float32), each [..., top_k].")
      .def_property_readonly("top_k", &MoeLayer::top_k, "experts per token")
      .def_property_readonly("num_experts", &MoeLayer::num_experts)
      .def_property_readonly("hidden", &MoeLayer::hidden, "K, the input and output width")
      .def_property_readonly(
          "name", [](const MoeLayer& l) { return python_text(l.placements().back().layer); },
          "the checkpoint prefix")
      .def_property_readonly(
          "backend", [](const MoeLayer& l) { return python_text(l.placements().back().backend); },
          "the backend that runs the experts")
      .def_property_readonly(
          "kernel", [](const MoeLayer& l) { return python_text(l.placements().back().kernel); },
          "the kernel that runs the experts")
      .def_property_readonly("prepared_bytes", &MoeLayer::prepared_bytes)
      .def(
          "explain", [](const MoeLayer& l) { return python_text(explain_moe(l)); },
          "Where the router and the experts run, the candidates passed over, every verdict.")
      .def("__repr__", [](const MoeLayer& l) {
        const std::string text = placement_text(l.placements().back());
        return "nibble.MoeLayer(" + text.substr(0, text.find('\n')) +
               ", experts=" + std::to_string(l.num_experts()) +
               ", top_k=" + std::to_string(l.top_k()) + ")";
      });
}

}  // namespace nibble::python
