// nibble.Checkpoint (config.json + safetensors, sharded or not) and the layer facts it lists,
// nibble.LayerInfo and nibble.MoeInfo, with the fields of their C++ structs.
#include <nibble/checkpoint.hpp>
#include <nibble/untrusted_text.hpp>

#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include "bindings.hpp"
#include "json_to_python.hpp"
#include "python_text.hpp"

namespace nibble::python {

namespace {

std::string layer_repr(const LayerInfo& l) {
  std::string r = "nibble.LayerInfo(prefix='" + escape_untrusted(l.prefix, 200) + "', scheme='" +
                  escape_untrusted(l.scheme) + "', K=" + std::to_string(l.K) +
                  ", N=" + std::to_string(l.N);
  if (l.kind == LayerKind::Quantized)
    r += ", bits=" + std::to_string(l.bits) + ", group_size=" + std::to_string(l.group_size);
  return r + ")";
}

std::string moe_repr(const MoeInfo& b) {
  return "nibble.MoeInfo(prefix='" + escape_untrusted(b.prefix, 200) + "', scheme='" +
         escape_untrusted(b.scheme) + "', num_experts=" + std::to_string(b.num_experts) +
         ", hidden=" + std::to_string(b.hidden) +
         ", intermediate=" + std::to_string(b.intermediate) + ", top_k=" + std::to_string(b.top_k) +
         ")";
}

// A string member, with python_text's handling of bytes from the file.
template <class Struct>
auto text_of(std::string Struct::*member) {
  return [member](const Struct& s) { return python_text(s.*member); };
}

}  // namespace

void bind_checkpoint(py::module_& m) {
  py::class_<LayerInfo>(m, "LayerInfo",
                        "One linear layer of a checkpoint outside the MoE experts (routers and "
                        "modules_to_not_convert layers included).")
      .def_property_readonly("prefix", text_of(&LayerInfo::prefix),
                             "module name, e.g. 'model.layers.0.self_attn.q_proj'")
      .def_property_readonly(
          "kind",
          [](const LayerInfo& l) { return l.kind == LayerKind::Quantized ? "quantized" : "dense"; },
          "'quantized' or 'dense'")
      .def_property_readonly("scheme", text_of(&LayerInfo::scheme),
                             "'gptq_v1', 'gptq_v2', 'awq_gemm' or 'dense'")
      .def_readonly("K", &LayerInfo::K, "in_features")
      .def_readonly("N", &LayerInfo::N, "out_features")
      .def_readonly("bits", &LayerInfo::bits, "0 for dense")
      .def_readonly("group_size", &LayerInfo::group_size, "-1: one group; 0 for dense")
      .def_readonly("act_order", &LayerInfo::act_order, "g_idx present and not the identity")
      .def_readonly("symmetric", &LayerInfo::symmetric, "every zero point is 2^(bits-1)")
      .def_readonly("has_bias", &LayerInfo::has_bias)
      .def_readonly("bytes", &LayerInfo::bytes, "bytes on disk of its tensors")
      .def_property_readonly("dtype", text_of(&LayerInfo::dtype),
                             "scales dtype (quantized) or weight dtype (dense), e.g. 'F16'")
      .def_readonly("stored_max_zeros", &LayerInfo::stored_max_zeros,
                    "GPTQ v1: stored zeros equal to 2^bits - 1 (decoded as 2^bits)")
      .def_property_readonly("note", text_of(&LayerInfo::note),
                             "why its settings differ from the global config, if they do")
      .def("__repr__", &layer_repr);

  py::class_<MoeInfo>(m, "MoeInfo", "One Mixture-of-Experts block of a checkpoint.")
      .def_property_readonly("prefix", text_of(&MoeInfo::prefix), "e.g. 'model.layers.0.mlp'")
      .def_property_readonly("router_prefix", text_of(&MoeInfo::router_prefix),
                             "the router, a dense layer [num_experts, hidden]")
      .def_property_readonly(
          "style", [](const MoeInfo& b) { return std::string(moe_style_name(b.style)); },
          "'qwen' (experts.{e}.gate_proj/up_proj/down_proj) or 'mixtral' (experts.{e}.w1/w3/w2)")
      .def_readonly("num_experts", &MoeInfo::num_experts)
      .def_readonly("hidden", &MoeInfo::hidden, "K, the block's input and output width")
      .def_readonly("intermediate", &MoeInfo::intermediate, "I, one expert's intermediate width")
      .def_property_readonly("scheme", text_of(&MoeInfo::scheme), "the experts' scheme")
      .def_readonly("w13_bits", &MoeInfo::w13_bits)
      .def_readonly("w13_group_size", &MoeInfo::w13_group_size)
      .def_readonly("w2_bits", &MoeInfo::w2_bits)
      .def_readonly("w2_group_size", &MoeInfo::w2_group_size)
      .def_readonly("act_order", &MoeInfo::act_order)
      .def_property_readonly("dtype", text_of(&MoeInfo::dtype), "expert 0's scales dtype")
      .def_readonly("w13_symmetric", &MoeInfo::w13_symmetric)
      .def_readonly("w2_symmetric", &MoeInfo::w2_symmetric)
      .def_readonly("w13_max_zero", &MoeInfo::w13_max_zero, "0: unknown")
      .def_readonly("w2_max_zero", &MoeInfo::w2_max_zero, "0: unknown")
      .def_readonly("top_k", &MoeInfo::top_k, "config.json num_experts_per_tok; 0 when absent")
      .def_readonly("norm_topk_prob", &MoeInfo::norm_topk_prob)
      .def_property_readonly("scoring", text_of(&MoeInfo::scoring), "'softmax' or 'sigmoid'")
      .def_readonly("bytes", &MoeInfo::bytes, "bytes on disk of its expert tensors")
      .def("__repr__", &moe_repr);

  py::class_<Checkpoint>(m, "Checkpoint",
                         "A Hugging Face style checkpoint: config.json and model.safetensors or "
                         "its shards (model.safetensors.index.json).")
      .def_static(
          "open",
          [](const std::filesystem::path& path) {
            py::gil_scoped_release nogil;
            return Checkpoint::open(path);
          },
          py::arg("path"),
          "Open a directory, a .safetensors file or an index file. Shapes and the configuration "
          "are checked now (CheckpointError naming the file and tensor), values when a layer is "
          "built.")
      .def_property_readonly(
          "directory", [](const Checkpoint& c) { return c.directory(); },
          "the checkpoint directory")
      .def_property_readonly(
          "config", [](const Checkpoint& c) { return json_to_python(c.config()); },
          "config.json as a dict (empty when there is none)")
      .def_property_readonly(
          "quant_config",
          [](const Checkpoint& c) -> py::object {
            if (!c.quant_config()) return py::none();
            return json_to_python(nlohmann::json::parse(c.quant_config()->to_json().dump()));
          },
          "the quantization config as nibble reads it (a dict), None for a dense model")
      .def("linear_layers", &Checkpoint::linear_layers,
           "Linear layers outside MoE experts, sorted by prefix (a list of LayerInfo).")
      .def("moe_blocks", &Checkpoint::moe_blocks,
           "MoE blocks, sorted by prefix (a list of MoeInfo).")
      .def_property_readonly(
          "warnings",
          [](const Checkpoint& c) {
            py::list out;
            for (const auto& w : c.warnings()) out.append(python_text(w));
            return out;
          },
          "findings worth telling the user (relabelled v2 layers, suspect v1 zeros, ...)")
      .def("__repr__", [](const Checkpoint& c) {
        return "nibble.Checkpoint('" + escape_untrusted(c.directory().string(), 400) + "')";
      });
}

}  // namespace nibble::python
