// Runtime.linear_from_tensors, Runtime.moe_from_tensors and Runtime.dense: layers from the tensors
// an engine holds (its checkpoint tensors, possibly tensor-parallel shards), imported by DLPack
// without a copy for the duration of the call; the backend keeps its own repacked copy.
#include <nibble/error.hpp>
#include <nibble/runtime.hpp>
#include <nibble/sdk/numeric.hpp>

#include <pybind11/stl.h>

#include <deque>
#include <optional>

#include "bindings.hpp"
#include "imported_tensor.hpp"
#include "layer_call.hpp"
#include "row_view.hpp"
#include "tensor_text.hpp"

namespace nibble::python {

namespace {

// The imports behind a call's DLTensor pointers, kept until the call returns.
class TensorImports {
 public:
  TensorImports() { last_build_pointers().clear(); }

  /// The DLTensor of `obj` (named `what`), or nullptr for None.
  const DLTensor* add(py::handle obj, const std::string& what) {
    if (obj.is_none()) return nullptr;
    names_.push_back(what);
    imports_.push_back(ImportedTensor::from(obj, names_.back().c_str()));
    const DLTensor& t = imports_.back().tensor();
    last_build_pointers().emplace_back(what, reinterpret_cast<uintptr_t>(t.data) + t.byte_offset);
    return &t;
  }

 private:
  std::deque<std::string> names_;  // deques: pointers into them stay valid as they grow
  std::deque<ImportedTensor> imports_;
};

QuantFormat quant_format(const std::string& method, std::optional<std::string> checkpoint_format,
                         int bits, int group_size, bool sym) {
  QuantFormat f;
  f.method = method;
  // AWQ's only layout is GEMM, GPTQ's default v1: the argument may be left out for either.
  f.checkpoint_format = checkpoint_format ? *checkpoint_format : method == "awq" ? "gemm" : "gptq";
  f.bits = bits;
  f.group_size = group_size;
  f.sym = sym;
  return f;
}

// One layer's tensors from a dict {"qweight", "qzeros", "scales", "g_idx"?, "bias"?} (`what` names
// it in errors).
QuantTensors quant_tensors(TensorImports& imports, const py::handle& d, const std::string& what) {
  if (!py::isinstance<py::dict>(d))
    throw InvalidArgument(what +
                          ": expected a dict with qweight, qzeros, scales and optional "
                          "g_idx and bias");
  const py::dict tensors = py::reinterpret_borrow<py::dict>(d);
  for (const auto& [key, value] : tensors) {
    const std::string k = py::str(key);
    if (k != "qweight" && k != "qzeros" && k != "scales" && k != "g_idx" && k != "bias")
      throw InvalidArgument(what + ": unknown key '" + k +
                            "' (expected qweight, qzeros, scales, g_idx, bias)");
  }
  auto get = [&](const char* key) -> const DLTensor* {
    if (!tensors.contains(key)) return nullptr;
    return imports.add(tensors[key], what + "." + key);
  };
  return QuantTensors{get("qweight"), get("qzeros"), get("scales"), get("g_idx"), get("bias")};
}

// A dense weight [N, K] (and bias [N]) in CPU memory, row-major with rows of K elements.
nibble_dense_weight dense_weight(TensorImports& imports, py::handle weight, py::handle bias,
                                 const std::string& what) {
  const DLTensor* w = imports.add(weight, what);
  if (!w) throw InvalidArgument(what + " is required");
  if (w->ndim != 2)
    throw InvalidArgument(what + " has shape " + shape_text(w->shape, w->ndim) +
                          "; expected [N, K]");
  const RowView rows(*w, what.c_str(), w->shape[1]);
  if (rows.rows() > 1 && rows.tensor().strides[0] != w->shape[1])
    throw InvalidArgument(what + " must be contiguous (rows of " + std::to_string(w->shape[1]) +
                          " elements)");
  nibble_dense_weight d{};
  d.struct_size = sizeof d;
  d.K = w->shape[1];
  d.N = w->shape[0];
  d.data = rows.tensor().data;
  d.dtype = w->dtype;
  d.bias_dtype = w->dtype;
  if (const DLTensor* b = imports.add(bias, what + " bias")) {
    const RowView bias_rows(*b, (what + " bias").c_str(), d.N);
    if (b->ndim != 1)
      throw InvalidArgument(what + " bias has shape " + shape_text(b->shape, b->ndim) +
                            "; expected [" + std::to_string(d.N) + "]");
    d.bias = bias_rows.tensor().data;
    d.bias_dtype = b->dtype;
  }
  return d;
}

}  // namespace

void bind_layers_from_tensors(py::class_<Runtime>& runtime) {
  runtime.def(
      "linear_from_tensors",
      [](const Runtime& rt, const std::string& method, py::handle qweight, py::handle qzeros,
         py::handle scales, py::handle g_idx, py::handle bias, int bits, int group_size,
         std::optional<std::string> checkpoint_format, bool sym, std::optional<std::string> name) {
        const std::string layer = name ? *name : "layer";
        TensorImports imports;
        const QuantTensors t{imports.add(qweight, "qweight"), imports.add(qzeros, "qzeros"),
                             imports.add(scales, "scales"), imports.add(g_idx, "g_idx"),
                             imports.add(bias, "bias")};
        const QuantFormat f = quant_format(method, checkpoint_format, bits, group_size, sym);
        py::gil_scoped_release nogil;
        return rt.linear_from_tensors(layer, t, f);
      },
      py::arg("method") = "gptq", py::kw_only(), py::arg("qweight"), py::arg("qzeros"),
      py::arg("scales"), py::arg("g_idx") = py::none(), py::arg("bias") = py::none(),
      py::arg("bits") = 4, py::arg("group_size") = 128, py::arg("checkpoint_format") = py::none(),
      py::arg("sym") = true, py::arg("name") = py::none(),
      "A quantized linear layer from the tensors a checkpoint stores and an engine holds "
      "(method 'gptq' or 'awq'; checkpoint_format 'gptq' (v1) or 'gptq_v2' for GPTQ, 'gemm' for "
      "AWQ, defaulting to 'gptq' and 'gemm'). The tensors are read during the call only.");
  runtime.def(
      "moe_from_tensors",
      [](const Runtime& rt, const std::string& method, py::object experts, py::object w13,
         py::object w2, py::handle router, py::handle router_bias, int top_k,
         std::optional<bool> renormalize, std::optional<std::string> scoring, int bits,
         int group_size, std::optional<std::string> checkpoint_format, bool sym,
         std::optional<std::string> name) {
        const std::string block = name ? *name : "moe";
        TensorImports imports;
        MoeTensors t;
        if (!experts.is_none()) {
          size_t e = 0;
          for (const py::handle ex : experts) {
            const std::string at = "experts[" + std::to_string(e++) + "]";
            if (!py::isinstance<py::dict>(ex) || !ex.contains("gate") || !ex.contains("up") ||
                !ex.contains("down"))
              throw InvalidArgument(at + ": expected a dict with gate, up and down");
            t.experts.push_back({quant_tensors(imports, ex["gate"], at + ".gate"),
                                 quant_tensors(imports, ex["up"], at + ".up"),
                                 quant_tensors(imports, ex["down"], at + ".down")});
          }
        }
        if (!w13.is_none()) t.w13 = quant_tensors(imports, w13, "w13");
        if (!w2.is_none()) t.w2 = quant_tensors(imports, w2, "w2");
        std::optional<nibble_dense_weight> gate;
        if (!router.is_none()) gate = dense_weight(imports, router, router_bias, "router");
        MoeOptions o;
        o.top_k = top_k;
        o.renormalize = renormalize;
        if (scoring) o.scoring = *scoring;
        const QuantFormat f = quant_format(method, checkpoint_format, bits, group_size, sym);
        py::gil_scoped_release nogil;
        return rt.moe_from_tensors(block, t, f, gate ? &*gate : nullptr, o);
      },
      py::arg("method") = "gptq", py::kw_only(), py::arg("experts") = py::none(),
      py::arg("w13") = py::none(), py::arg("w2") = py::none(), py::arg("router") = py::none(),
      py::arg("router_bias") = py::none(), py::arg("top_k"), py::arg("renormalize") = py::none(),
      py::arg("scoring") = py::none(), py::arg("bits") = 4, py::arg("group_size") = 128,
      py::arg("checkpoint_format") = py::none(), py::arg("sym") = true,
      py::arg("name") = py::none(),
      "A MoE block from expert tensors: experts=[{'gate': {...}, 'up': {...}, 'down': {...}}, "
      "...] with each {...} a dict of qweight, qzeros, scales, g_idx, or stacked w13={...} and "
      "w2={...} whose tensors are [E, ...] (w13: gate's output channels, then up's). router "
      "(a float [E, K] weight) is optional: without it only experts() runs.");
  runtime.def(
      "dense",
      [](const Runtime& rt, py::handle weight, py::handle bias, std::optional<std::string> name) {
        TensorImports imports;
        const nibble_dense_weight w = dense_weight(imports, weight, bias, "weight");
        py::gil_scoped_release nogil;
        return rt.dense(name ? *name : "dense", w);
      },
      py::arg("weight"), py::arg("bias") = py::none(), py::arg("name") = py::none(),
      "A dense layer from a float32, bfloat16 or float16 weight [N, K] (and bias [N]) the "
      "caller holds; the backend copies it.");
}

}  // namespace nibble::python
