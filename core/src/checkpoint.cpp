// Opening a checkpoint and discovering its layers. Everything that can be checked from shapes and
// the configuration is checked here, so a checkpoint that opens lists consistent layers.
#include <nibble/checkpoint.hpp>
#include <nibble/error.hpp>

#include <fmt/format.h>

#include <nibble/untrusted_text.hpp>

#include "error_kind.hpp"
#include "io/regular_file.hpp"
#include "json/untrusted_json.hpp"
#include "schemes/stored_zeros.hpp"
#include "text/name_text.hpp"

namespace nibble {

namespace {

bool ends_with(const std::string& s, std::string_view suffix) { return s.ends_with(suffix); }

std::string strip_suffix(const std::string& s, std::string_view suffix) {
  return s.substr(0, s.size() - suffix.size());
}

std::string q(const std::string& name) { return detail::name_text(name); }
std::string path_text(const std::filesystem::path& p) { return escape_untrusted(p.string(), 400); }

// The parts of an expert's module name, "<block>.experts.<e>.<projection>", matched by hand: the
// name is untrusted and may be megabytes long, which a backtracking regex turns into deep
// recursion. Linear in the name; nullopt when it is not an expert's.
struct ExpertName {
  std::string block;
  int expert = 0;
  std::string projection;
};
std::optional<ExpertName> parse_expert_name(std::string_view name) {
  const size_t dot = name.rfind('.');
  if (dot == std::string_view::npos) return std::nullopt;
  const std::string_view projection = name.substr(dot + 1);
  static constexpr std::string_view kProjections[] = {"gate_proj", "up_proj", "down_proj",
                                                      "w1",        "w2",      "w3"};
  if (std::find(std::begin(kProjections), std::end(kProjections), projection) ==
      std::end(kProjections)) {
    return std::nullopt;
  }
  const std::string_view rest = name.substr(0, dot);
  const size_t dot2 = rest.rfind('.');
  if (dot2 == std::string_view::npos) return std::nullopt;
  const std::string_view digits = rest.substr(dot2 + 1);
  if (digits.empty() || digits.size() > 6 ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return std::nullopt;
  }
  constexpr std::string_view kExperts = ".experts";
  const std::string_view block = rest.substr(0, dot2);
  if (block.size() <= kExperts.size() || !block.ends_with(kExperts)) return std::nullopt;
  ExpertName out;
  out.block = std::string(block.substr(0, block.size() - kExperts.size()));
  for (char c : digits) out.expert = out.expert * 10 + (c - '0');
  out.projection = std::string(projection);
  return out;
}

bool is_float(DType d) { return d == DType::F16 || d == DType::BF16 || d == DType::F32; }

// Module names whose 2-D `.weight` is not a linear layer's: embeddings (and norms, which are
// 1-D anyway but are excluded by name for clarity).
bool is_linear_module_name(const std::string& prefix) {
  std::string last =
      prefix.substr(prefix.rfind('.') == std::string::npos ? 0 : prefix.rfind('.') + 1);
  return last.find("embed") == std::string::npos && last.find("norm") == std::string::npos &&
         last != "wte" && last != "wpe";
}

}  // namespace

std::string_view moe_style_name(MoeStyle style) {
  return style == MoeStyle::Qwen ? "qwen" : "mixtral";
}

nibble_dense_weight DenseTensor::view() const {
  nibble_dense_weight v{};
  v.struct_size = sizeof v;
  v.K = K;
  v.N = N;
  v.data = weight->data;
  v.dtype = to_dlpack(weight->dtype);
  v.bias = bias ? bias->data : nullptr;
  v.bias_dtype = bias ? to_dlpack(bias->dtype) : DLDataType{kDLFloat, 32, 1};
  return v;
}

Checkpoint Checkpoint::open(const std::filesystem::path& path) {
  return detail::with_error_kind<CheckpointError>([&] {
    namespace fs = std::filesystem;
    Checkpoint cp;
    std::error_code ec;
    if (fs::is_directory(path, ec)) {
      cp.dir_ = path;
      if (fs::exists(path / "model.safetensors.index.json", ec)) {
        cp.store_ = TensorStore::open(path / "model.safetensors.index.json");
      } else if (fs::exists(path / "model.safetensors", ec)) {
        cp.store_ = TensorStore::open(path / "model.safetensors");
      } else {
        throw Error(
            fmt::format("checkpoint directory {} has neither model.safetensors nor "
                        "model.safetensors.index.json",
                        path_text(path)));
      }
    } else if (fs::exists(path, ec)) {
      // Opening refuses anything but a regular file (a FIFO, a device) without blocking.
      cp.dir_ = path.parent_path().empty() ? fs::path(".") : path.parent_path();
      cp.store_ = TensorStore::open(path);
    } else {
      throw Error(fmt::format("no checkpoint at {} (expected a directory or a .safetensors file)",
                              path_text(path)));
    }
    fs::path config = cp.dir_ / "config.json";
    if (fs::exists(config, ec) || fs::is_symlink(config, ec)) {
      const std::string text = detail::read_regular_file(config, 16u << 20, "checkpoint config");
      cp.config_ = detail::parse_json(text, path_text(config));
      if (!cp.config_.is_object())
        throw Error(fmt::format("{}: expected a JSON object", path_text(config)));
    }
    cp.quant_ = load_quant_config(cp.dir_);
    cp.discover();
    return cp;
  });
}

Checkpoint::QuantLayer Checkpoint::make_quant_layer(const std::string& prefix) {
  QuantLayer layer;
  LayerTensors& t = layer.tensors;
  t.prefix = prefix;
  t.qweight = store_.find(prefix + ".qweight");
  t.qzeros = store_.find(prefix + ".qzeros");
  t.scales = store_.find(prefix + ".scales");
  t.g_idx = store_.find(prefix + ".g_idx");
  t.bias = store_.find(prefix + ".bias");
  const QuantConfig& cfg = *quant_;
  ModuleQuant mq = cfg.for_module(prefix);
  if (!mq.quantized) {
    // The tensors are the ground truth: a qweight is decoded, and discover() tells the user once
    // per rule (substring rules such as "gate" also match every expert's gate_proj).
    auto& [count, example] = quantized_despite_[mq.reason];
    if (count++ == 0) example = prefix;
    mq = ModuleQuant{true, cfg.bits, cfg.group_size, cfg.sym, cfg.desc_act, ""};
  }
  layer.params = SchemeParams{mq.bits, mq.group_size, mq.sym};
  if (cfg.method == QuantMethod::Awq) {
    layer.kind = SchemeKind::AwqGemm;
  } else {
    SchemeKind labelled =
        cfg.checkpoint_format == "gptq_v2" ? SchemeKind::GptqV2 : SchemeKind::GptqV1;
    get_scheme(labelled).check(t, layer.params);  // shapes first, then the v1-or-v2 value check
    layer.kind = resolve_gptq_scheme(t, layer.params, labelled, warnings_);
  }
  layer.shape = get_scheme(layer.kind).check(t, layer.params);

  LayerInfo& info = layer.info;
  info.prefix = prefix;
  info.kind = LayerKind::Quantized;
  info.scheme = std::string(scheme_name(layer.kind));
  info.K = layer.shape.K;
  info.N = layer.shape.N;
  info.bits = mq.bits;
  info.group_size = mq.group_size;
  info.has_bias = t.bias != nullptr;
  info.bytes = layer.shape.bytes;
  info.dtype = std::string(safetensors_dtype_name(t.scales->dtype));
  info.note = mq.reason;
  if (t.g_idx) {
    for (int64_t k = 0; k < info.K; ++k) {
      int32_t g = t.g_idx->i32(size_t(k));
      if (g < 0 || g >= layer.shape.num_groups) {
        throw Error(fmt::format(
            "tensor {} in {}: g_idx[{}] = {} is outside [0, {}) (group_size = "
            "{})",
            q(t.g_idx->name), t.g_idx->file, k, g, layer.shape.num_groups, mq.group_size));
      }
      int64_t identity = mq.group_size == -1 ? 0 : k / mq.group_size;
      info.act_order = info.act_order || g != identity;
    }
  }
  // Stored zero values: symmetry, and suspect v1 nibbles (docs/formats.md#gptq-v1-zero-points).
  const detail::StoredZeros zeros = detail::stored_zeros(*t.qzeros, layer.kind, mq.bits, info.N);
  const int64_t total = zeros.total;
  const std::vector<int64_t>& hist = zeros.histogram;
  info.symmetric = zeros.symmetric;
  if (layer.kind == SchemeKind::GptqV1) {
    info.stored_max_zeros = zeros.v1_stored_max;
    if (info.stored_max_zeros > 0) {
      warnings_.push_back(fmt::format(
          "layer {}: {} of {} stored zero points in {} are {:#x}. gptq v1 stores zero - 1, so they "
          "decode (unmasked, as ExLlama/vLLM/sglang do) to {}; such values usually come from the "
          "v1 underflow of a true zero 0 (AutoGPTQ PR #325/#640), which also corrupts later zeros "
          "of the same int32 word: suspect, prefer a gptq_v2 export "
          "(docs/formats.md#gptq-v1-zero-points){}",
          q(prefix), info.stored_max_zeros, total, q(t.qzeros->name), hist.size() - 1, hist.size(),
          mq.bits == 8 ? "; at 8 bits 256 does not fit the canonical zero point and decoding fails"
                       : ""));
    }
  }
  return layer;
}

void Checkpoint::discover() {
  const std::vector<std::string> names = store_.names();
  std::set<std::string> qprefixes;
  for (const auto& n : names) {
    if (ends_with(n, ".qweight")) qprefixes.insert(strip_suffix(n, ".qweight"));
  }
  for (const auto& n : names) {
    for (std::string_view part : {".qzeros", ".scales", ".g_idx"}) {
      if (ends_with(n, part) && !qprefixes.count(strip_suffix(n, part)) &&
          !store_.find(strip_suffix(n, part) + ".weight")) {
        throw Error(fmt::format("tensor {} exists but {} is missing (in {})", q(n),
                                q(strip_suffix(n, part) + ".qweight"), store_.find(n)->file));
      }
    }
  }
  if (!qprefixes.empty() && !quant_) {
    throw Error(
        fmt::format("checkpoint {} holds quantized tensors (e.g. {}) but no "
                    "quantization config (config.json quantization_config, "
                    "quantize_config.json or quant_config.json)",
                    path_text(dir_), q(*qprefixes.begin() + ".qweight")));
  }
  for (const auto& p : qprefixes) quantized_.emplace(p, make_quant_layer(p));
  for (const auto& [reason, seen] : quantized_despite_) {
    warnings_.push_back(
        fmt::format("{} layer(s) have a qweight although {} in {} (e.g. {}); they are "
                    "decoded as quantized with the global settings",
                    seen.first, reason, quant_->source, q(seen.second)));
  }
  for (const auto& n : names) {
    if (!ends_with(n, ".weight")) continue;
    std::string p = strip_suffix(n, ".weight");
    const TensorView* w = store_.find(n);
    if (qprefixes.count(p) || w->shape.size() != 2 || w->numel() == 0 || !is_float(w->dtype) ||
        !is_linear_module_name(p)) {
      continue;
    }
    DenseLayer d;
    d.tensor.prefix = p;
    d.tensor.weight = w;
    d.tensor.N = w->shape[0];
    d.tensor.K = w->shape[1];
    d.tensor.bias = store_.find(p + ".bias");
    if (d.tensor.bias) {
      const TensorView& b = *d.tensor.bias;
      if (!is_float(b.dtype) || b.shape != std::vector<int64_t>{d.tensor.N}) {
        throw Error(fmt::format(
            "tensor {} in {} is {} {}, expected a float tensor [{}] matching {}", q(b.name), b.file,
            safetensors_dtype_name(b.dtype), b.shape_string(), d.tensor.N, q(n)));
      }
    }
    d.info.prefix = p;
    d.info.kind = LayerKind::Dense;
    d.info.scheme = "dense";
    d.info.K = d.tensor.K;
    d.info.N = d.tensor.N;
    d.info.has_bias = d.tensor.bias != nullptr;
    d.info.bytes = w->nbytes + (d.tensor.bias ? d.tensor.bias->nbytes : 0);
    d.info.dtype = std::string(safetensors_dtype_name(w->dtype));
    dense_.emplace(p, std::move(d));
  }
  if (quant_) {
    bool lm_head_quantized = false;
    for (const auto& p : qprefixes) lm_head_quantized |= p == "lm_head" || p.ends_with(".lm_head");
    if (quant_->lm_head && !lm_head_quantized &&
        (dense_.count("lm_head") || store_.find("lm_head.weight"))) {
      warnings_.push_back(
          fmt::format("{} says lm_head: true, but lm_head is stored dense; it is "
                      "used as a dense layer",
                      quant_->source));
    }
    if (!quant_->lm_head && lm_head_quantized) {
      warnings_.push_back(
          fmt::format("{} says lm_head: false, but the checkpoint has a quantized "
                      "lm_head; it is decoded as quantized",
                      quant_->source));
    }
  }
  std::map<std::string, std::map<int, std::map<std::string, std::string>>> found;
  auto scan = [&](const std::string& p) {
    if (auto m = parse_expert_name(p)) found[m->block][m->expert][m->projection] = p;
  };
  for (const auto& [p, layer] : quantized_) scan(p);
  for (const auto& [p, layer] : dense_) scan(p);
  discover_moe(found);
}

}  // namespace nibble
