// Layers from an engine's tensors through the schemes' own checks and decode: the format read,
// a row-parallel shard's g_idx rebased (layer_tensors.hpp states the rule), v1/v2 resolved as for
// a checkpoint layer.
#include "engine_layer.hpp"

#include <nibble/error.hpp>
#include <nibble/log.hpp>

#include <algorithm>
#include <limits>

#include "dlpack_view.hpp"
#include "tensor_checks.hpp"
#include "text/name_text.hpp"

namespace nibble::detail {

namespace {

std::optional<TensorView> view_of(const DLTensor* t, const std::string& name, const char* suffix) {
  if (!t) return std::nullopt;
  return dlpack_view(*t, name + "." + suffix, tensors_label(name));
}

const TensorView* ptr(const std::optional<TensorView>& v) { return v ? &*v : nullptr; }

}  // namespace

std::string tensors_label(const std::string& name) {
  return "<tensors of " + name_text(name) + ">";
}

FormatScheme format_scheme(const QuantFormat& f, const std::string& name) {
  const std::string layer = "layer " + name_text(name);
  FormatScheme s;
  if (f.method == "gptq") {
    if (f.checkpoint_format == "gptq") {
      s.labelled = SchemeKind::GptqV1;
    } else if (f.checkpoint_format == "gptq_v2") {
      s.labelled = SchemeKind::GptqV2;
    } else {
      throw Error(
          fmt::format("{}: GPTQ checkpoint_format {} is not supported (expected gptq or "
                      "gptq_v2)",
                      layer, quoted_untrusted(f.checkpoint_format)));
    }
    if (f.bits != 4 && f.bits != 8)
      throw Error(
          fmt::format("{}: bits={} is not supported for GPTQ (expected 4 or 8)", layer, f.bits));
  } else if (f.method == "awq") {
    if (f.checkpoint_format != "gemm")
      throw Error(
          fmt::format("{}: AWQ checkpoint_format (version) {} is not supported (expected "
                      "gemm)",
                      layer, quoted_untrusted(f.checkpoint_format)));
    if (f.bits != 4)
      throw Error(
          fmt::format("{}: bits={} is not supported for AWQ GEMM (expected 4)", layer, f.bits));
    s.labelled = SchemeKind::AwqGemm;
  } else {
    throw Error(fmt::format("{}: quantization method {} is not supported (expected gptq or awq)",
                            layer, quoted_untrusted(f.method)));
  }
  if (f.group_size != -1 && f.group_size <= 0)
    throw Error(fmt::format("{}: group_size={} is not supported (expected a positive size or -1)",
                            layer, f.group_size));
  // AWQ always stores zero points, whatever `sym` says.
  s.params = SchemeParams{f.bits, f.group_size, s.labelled == SchemeKind::AwqGemm ? false : f.sym};
  return s;
}

EngineLayer::EngineLayer(const std::string& name, const QuantTensors& t)
    : name_(name),
      qweight_(view_of(t.qweight, name, "qweight")),
      qzeros_(view_of(t.qzeros, name, "qzeros")),
      scales_(view_of(t.scales, name, "scales")),
      g_idx_(view_of(t.g_idx, name, "g_idx")),
      bias_(view_of(t.bias, name, "bias")) {}

EngineLayer::EngineLayer(const std::string& name, std::optional<TensorView> qweight,
                         std::optional<TensorView> qzeros, std::optional<TensorView> scales,
                         std::optional<TensorView> g_idx, std::optional<TensorView> bias)
    : name_(name),
      qweight_(std::move(qweight)),
      qzeros_(std::move(qzeros)),
      scales_(std::move(scales)),
      g_idx_(std::move(g_idx)),
      bias_(std::move(bias)) {}

LayerTensors EngineLayer::tensors() const {
  LayerTensors t;
  t.prefix = name_;
  t.qweight = ptr(qweight_);
  t.qzeros = ptr(qzeros_);
  t.scales = ptr(scales_);
  t.g_idx = rebased_view_ ? &*rebased_view_ : ptr(g_idx_);
  t.bias = ptr(bias_);
  return t;
}

LayerShape EngineLayer::resolve(const FormatScheme& f, std::vector<std::string>& warnings) {
  params_ = f.params;
  rebased_view_.reset();
  rebased_.reset();
  if (f.labelled == SchemeKind::AwqGemm) {
    kind_ = SchemeKind::AwqGemm;
    rows_ = schemes::GroupRows::FromGroupSize;
    shape_ = get_scheme(kind_).check(tensors(), params_);
  } else {
    // Only a layer with a g_idx may be a row-parallel shard whose scales rows K does not span.
    rows_ = g_idx_ ? schemes::GroupRows::FromScales : schemes::GroupRows::FromGroupSize;
    schemes::check_gptq(f.labelled, tensors(), params_, rows_);  // shapes before values
    if (g_idx_) rebase_g_idx();
    kind_ = resolve_gptq_scheme(tensors(), params_, f.labelled, warnings);
    shape_ = schemes::check_gptq(kind_, tensors(), params_, rows_);
  }
  resolved_ = true;
  return shape_;
}

void EngineLayer::rebase_g_idx() {
  const TensorView& g = *g_idx_;  // I32 [K], checked
  const int64_t rows = scales_->shape[0];
  int32_t lo = std::numeric_limits<int32_t>::max(), hi = std::numeric_limits<int32_t>::min();
  for (int64_t k = 0; k < g.numel(); ++k) {
    lo = std::min(lo, g.i32(size_t(k)));
    hi = std::max(hi, g.i32(size_t(k)));
  }
  if (hi < rows) return;  // it indexes the rows given (a negative value is refused at decode)
  if (lo > 0 && int64_t(hi) - lo < rows) {
    // A shard without act-order: global group numbers from the shard's first group on.
    OwnedTensor r = OwnedTensor::zeros(DType::I32, g.shape);
    for (int64_t k = 0; k < g.numel(); ++k) r.set_i32(size_t(k), g.i32(size_t(k)) - lo);
    rebased_ = std::move(r);
    rebased_view_ = rebased_->view(g.name);
    rebased_view_->file = g.file;
    return;
  }
  throw Error(fmt::format(
      "{}: g_idx holds groups {}..{}, but scales {} has {} group rows; expected values that index "
      "those rows (act-order, every group kept), or global groups of a row-parallel shard that "
      "start at its first group and span at most {} groups",
      schemes::where(g), lo, hi, scales_->shape_string(), rows, rows));
}

CanonicalWeight EngineLayer::decode() const {
  if (!resolved_) throw Error("internal: layer " + name_text(name_) + " decoded before resolve");
  CanonicalWeight w = kind_ == SchemeKind::AwqGemm
                          ? get_scheme(kind_).decode(tensors(), params_)
                          : schemes::decode_gptq(kind_, tensors(), params_, rows_);
  validate(w, "layer " + name_text(name_));
  return w;
}

bool EngineLayer::act_order() const {
  const TensorView* g = tensors().g_idx;
  if (!g) return false;
  for (int64_t k = 0; k < g->numel(); ++k) {
    const int64_t identity = params_.group_size == -1 ? 0 : k / params_.group_size;
    if (g->i32(size_t(k)) != identity) return true;
  }
  return false;
}

}  // namespace nibble::detail

namespace nibble {

CanonicalWeight decode_tensors(const std::string& name, const QuantTensors& tensors,
                               const QuantFormat& format, std::vector<std::string>* warnings) {
  const detail::FormatScheme scheme = detail::format_scheme(format, name);
  detail::EngineLayer layer(name, tensors);
  std::vector<std::string> found;
  layer.resolve(scheme, found);
  CanonicalWeight w = layer.decode();
  for (auto& m : found) {
    if (warnings)
      warnings->push_back(std::move(m));
    else
      log(LogLevel::Warning, "core", m);
  }
  return w;
}

}  // namespace nibble
