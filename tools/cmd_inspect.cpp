// nibble inspect DIR [--json]: the quantization config, every linear layer and MoE block with its
// scheme, shapes and bytes, and the warnings the loader raised.
#include <nibble/checkpoint.hpp>
#include <nibble/error.hpp>
#include <nibble/untrusted_text.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "commands.hpp"

namespace {

const char* kInspectHelp =
    "usage: nibble inspect DIR [--json]\n\n"
    "Open a checkpoint (a directory with config.json and model.safetensors or\n"
    "model.safetensors.index.json, or one .safetensors file) and print its quantization config,\n"
    "each linear layer (scheme, K x N, bits, group size, act-order, bytes), each MoE block, and\n"
    "warnings such as a relabelled gptq_v2 checkpoint or suspect GPTQ v1 zero points.\n\n"
    "  --json   print one JSON object instead of text\n\n"
    "example: nibble inspect models/qwen3-moe-gptq --json\n";

using nibble::escape_untrusted;

// `j` with every string and key escaped: names from the checkpoint may hold control bytes or
// invalid UTF-8, and the output must be valid JSON that is safe to print.
nlohmann::ordered_json escaped_json(const nlohmann::ordered_json& j) {
  if (j.is_string()) return escape_untrusted(j.get_ref<const std::string&>());
  if (j.is_array()) {
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    for (const auto& v : j) out.push_back(escaped_json(v));
    return out;
  }
  if (j.is_object()) {
    nlohmann::ordered_json out = nlohmann::ordered_json::object();
    for (const auto& [k, v] : j.items()) out[escape_untrusted(k)] = escaped_json(v);
    return out;
  }
  return j;
}

nlohmann::ordered_json config_json(const nibble::Checkpoint& ckpt) {
  const auto& q = ckpt.quant_config();
  if (!q) return nullptr;
  nlohmann::ordered_json j = escaped_json(q->to_json());
  j["source"] = q->source;  // already escaped
  return j;
}

nlohmann::ordered_json layer_json(const nibble::LayerInfo& l) {
  nlohmann::ordered_json j;
  j["prefix"] = escape_untrusted(l.prefix);
  j["kind"] = l.kind == nibble::LayerKind::Quantized ? "quantized" : "dense";
  j["scheme"] = l.scheme;
  j["K"] = l.K;
  j["N"] = l.N;
  if (l.kind == nibble::LayerKind::Quantized) {
    j["bits"] = l.bits;
    j["group_size"] = l.group_size;
    j["act_order"] = l.act_order;
    j["symmetric"] = l.symmetric;
    j["scales_dtype"] = l.dtype;
    if (l.scheme == "gptq_v1") j["stored_max_zeros"] = l.stored_max_zeros;
  } else {
    j["dtype"] = l.dtype;
  }
  j["bias"] = l.has_bias;
  j["bytes"] = l.bytes;
  if (!l.note.empty()) j["note"] = l.note;
  return j;
}

nlohmann::ordered_json moe_json(const nibble::MoeInfo& m) {
  nlohmann::ordered_json j;
  j["prefix"] = escape_untrusted(m.prefix);
  j["router"] = escape_untrusted(m.router_prefix);
  j["style"] = nibble::moe_style_name(m.style);
  j["experts"] = m.num_experts;
  j["hidden"] = m.hidden;
  j["intermediate"] = m.intermediate;
  j["scheme"] = m.scheme;
  j["w13"] = {{"bits", m.w13_bits}, {"group_size", m.w13_group_size}};
  j["w2"] = {{"bits", m.w2_bits}, {"group_size", m.w2_group_size}};
  j["act_order"] = m.act_order;
  j["top_k"] = m.top_k;
  j["norm_topk_prob"] = m.norm_topk_prob;
  j["scoring"] = escape_untrusted(m.scoring);
  j["bytes"] = m.bytes;
  return j;
}

std::string group_label(int gs) { return gs == -1 ? "-1 (per channel)" : std::to_string(gs); }

void print_text(const nibble::Checkpoint& ckpt, const std::vector<nibble::LayerInfo>& layers,
                const std::vector<nibble::MoeInfo>& blocks,
                const std::vector<std::string>& warnings) {
  fmt::print("checkpoint: {} ({} file(s), {} tensors)\n", ckpt.tensors().source(),
             ckpt.tensors().files().size(), ckpt.tensors().names().size());
  if (const auto& q = ckpt.quant_config()) {
    fmt::print("quantization ({}):\n", q->source);
    fmt::print("  method {}  bits {}  group_size {}  sym {}  desc_act {}  format {}\n",
               nibble::quant_method_name(q->method), q->bits, group_label(q->group_size), q->sym,
               q->desc_act, q->checkpoint_format);
    fmt::print("  static_groups {}  true_sequential {}  lm_head {}\n", q->static_groups,
               q->true_sequential, q->lm_head);
    if (!q->modules_to_not_convert.empty()) {
      std::vector<std::string> shown;
      for (const auto& m : q->modules_to_not_convert) shown.push_back(nibble::quoted_untrusted(m));
      fmt::print("  modules_to_not_convert: {}\n", fmt::join(shown, ", "));
    }
    for (const auto& r : q->dynamic) {
      std::vector<std::string> o;
      if (r.bits) o.push_back(fmt::format("bits={}", *r.bits));
      if (r.group_size) o.push_back(fmt::format("group_size={}", *r.group_size));
      if (r.sym) o.push_back(fmt::format("sym={}", *r.sym));
      if (r.desc_act) o.push_back(fmt::format("desc_act={}", *r.desc_act));
      fmt::print("  dynamic {}{}: {}\n", r.skip ? "-:" : "", escape_untrusted(r.pattern),
                 r.skip ? "skip" : fmt::format("{}", fmt::join(o, " ")));
    }
  } else {
    fmt::print("quantization: none (dense checkpoint)\n");
  }
  fmt::print("\nlinear layers ({}):\n", layers.size());
  for (const auto& l : layers) {
    std::string what =
        l.kind == nibble::LayerKind::Quantized
            ? fmt::format("{}-bit g{}{}{} scales {}", l.bits, l.group_size,
                          l.symmetric ? " sym" : " asym", l.act_order ? " act-order" : "", l.dtype)
            : l.dtype;
    fmt::print("  {:<48} {:<9} K={:<6} N={:<6} {}{}  {} bytes{}\n", escape_untrusted(l.prefix, 200),
               l.scheme, l.K, l.N, what, l.has_bias ? " +bias" : "", l.bytes,
               l.note.empty() ? "" : "  (" + l.note + ")");
  }
  if (!blocks.empty()) {
    fmt::print("\nMoE blocks ({}):\n", blocks.size());
    for (const auto& m : blocks) {
      fmt::print("  {} ({}, router {}): {} experts, hidden {}, intermediate {}, {}\n",
                 escape_untrusted(m.prefix, 200), nibble::moe_style_name(m.style),
                 escape_untrusted(m.router_prefix, 200), m.num_experts, m.hidden, m.intermediate,
                 m.scheme);
      fmt::print(
          "    w13 {}-bit g{}, w2 {}-bit g{}{}; top_k {}, norm_topk_prob {}, {} scoring; {} "
          "bytes\n",
          m.w13_bits, m.w13_group_size, m.w2_bits, m.w2_group_size,
          m.act_order ? ", act-order" : "", m.top_k ? std::to_string(m.top_k) : "unknown",
          m.norm_topk_prob, escape_untrusted(m.scoring, 100), m.bytes);
    }
  }
  fmt::print("\nwarnings ({}):\n", warnings.size());
  for (const auto& w : warnings) fmt::print("  - {}\n", w);
}

}  // namespace

int nibble_cmd_inspect(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  std::string dir;
  bool json = false;
  for (const auto& a : args) {
    if (a == "-h" || a == "--help") {
      fmt::print("{}", kInspectHelp);
      return 0;
    }
    if (a == "--json") {
      json = true;
    } else if (a.starts_with("-")) {
      fmt::print(stderr, "nibble inspect: unknown option {}\n\n{}", nibble::quoted_untrusted(a),
                 kInspectHelp);
      return 2;
    } else if (dir.empty()) {
      dir = a;
    } else {
      fmt::print(stderr, "nibble inspect: one checkpoint at a time ({} and {})\n",
                 nibble::quoted_untrusted(dir), nibble::quoted_untrusted(a));
      return 2;
    }
  }
  if (dir.empty()) {
    fmt::print(stderr, "nibble inspect: missing DIR\n\n{}", kInspectHelp);
    return 2;
  }
  nibble::Checkpoint ckpt = nibble::Checkpoint::open(dir);
  auto layers = ckpt.linear_layers();
  auto blocks = ckpt.moe_blocks();
  // The loader's findings, then the values it does not read at open (scales, router weights).
  std::vector<std::string> warnings = ckpt.warnings();
  for (auto& w : nibble::find_suspect_values(ckpt)) warnings.push_back(std::move(w));
  if (json) {
    nlohmann::ordered_json j;
    j["checkpoint"] = ckpt.tensors().source();
    j["files"] = ckpt.tensors().files().size();
    j["quantization_config"] = config_json(ckpt);
    j["linear_layers"] = nlohmann::ordered_json::array();
    for (const auto& l : layers) j["linear_layers"].push_back(layer_json(l));
    j["moe_blocks"] = nlohmann::ordered_json::array();
    for (const auto& m : blocks) j["moe_blocks"].push_back(moe_json(m));
    j["warnings"] = warnings;
    fmt::print("{}\n", j.dump(2));
  } else {
    print_text(ckpt, layers, blocks, warnings);
  }
  return 0;
}
