// MoE blocks from the expert tensors an engine holds, per expert or stacked over experts: every
// expert layer goes through the schemes as a linear layer from tensors does, the block is
// described from the tensors' shapes and stored zeros (no expert decoded), and the experts are
// prepared through the same expert source as a checkpoint's.
#include <nibble/error.hpp>
#include <nibble/log.hpp>
#include <nibble/runtime.hpp>

#include <fmt/format.h>

#include <array>
#include <memory>

#include "error_kind.hpp"
#include "moe_experts.hpp"
#include "schemes/dlpack_view.hpp"
#include "schemes/engine_layer.hpp"
#include "schemes/fuse_w13.hpp"
#include "schemes/stored_zeros.hpp"
#include "text/name_text.hpp"

namespace nibble {

namespace {

// The expert layers of one block: per expert (gate, up, down) or, stacked, (w13, w2).
class EngineExperts {
 public:
  EngineExperts(const std::string& name, const MoeTensors& t) : name_(name) {
    const bool per_expert = !t.experts.empty();
    const bool stacked = t.w13.qweight || t.w2.qweight || t.w13.scales || t.w2.scales;
    if (per_expert == stacked)
      throw Error(
          fmt::format("MoE block {}: {}; expected either experts (gate, up and down per "
                      "expert) or w13 and w2 (stacked over experts)",
                      q(), per_expert ? "both forms are set" : "no experts are set"));
    stacked_ = stacked;
    if (per_expert) {
      for (size_t e = 0; e < t.experts.size(); ++e) {
        const std::string p = fmt::format("{}.experts.{}", name, e);
        layers_.push_back({std::make_unique<detail::EngineLayer>(p + ".gate", t.experts[e].gate),
                           std::make_unique<detail::EngineLayer>(p + ".up", t.experts[e].up),
                           std::make_unique<detail::EngineLayer>(p + ".down", t.experts[e].down)});
      }
      return;
    }
    const std::array<Stack, 2> stacks = {stack(t.w13, "w13"), stack(t.w2, "w2")};
    const int64_t E = stacks[0].qweight->shape[0];
    for (int64_t e = 0; e < E; ++e) {
      std::array<std::unique_ptr<detail::EngineLayer>, 3> ex;
      for (size_t j = 0; j < 2; ++j) {
        const Stack& s = stacks[j];
        auto slice = [&](const std::optional<TensorView>& v) -> std::optional<TensorView> {
          if (!v) return std::nullopt;
          return detail::first_dim_slice(*v, e, fmt::format("{}[{}]", v->name, e));
        };
        ex[j] = std::make_unique<detail::EngineLayer>(
            fmt::format("{}.{}[{}]", name, s.part, e), slice(s.qweight), slice(s.qzeros),
            slice(s.scales), slice(s.g_idx), slice(s.bias));
      }
      layers_.push_back(std::move(ex));
    }
  }

  /// Check every expert layer, and describe the block from shapes and stored zeros.
  MoeInfo describe(const detail::FormatScheme& format, std::vector<std::string>& warnings) {
    MoeInfo info;
    info.prefix = name_;
    info.num_experts = int(layers_.size());
    info.w13_bits = info.w2_bits = format.params.bits;
    info.w13_group_size = info.w2_group_size = format.params.group_size;
    info.w13_symmetric = info.w2_symmetric = true;
    bool w13_stored_max = false, w2_stored_max = false;
    for (size_t e = 0; e < layers_.size(); ++e) {
      for (size_t j = 0; j < 3; ++j) {
        detail::EngineLayer* l = layers_[e][j].get();
        if (!l) continue;
        const LayerShape s = l->resolve(format, warnings);
        const bool down = stacked_ ? j == 1 : j == 2;
        if (e == 0 && j == 0) {
          info.hidden = s.K;
          if (stacked_ && s.N % 2 != 0)
            throw Error(
                fmt::format("MoE block {}: {} has N = {} output channels, expected an "
                            "even count (gate rows then up rows, I each)",
                            q(), detail::name_text(l->name()), s.N));
          info.intermediate = stacked_ ? s.N / 2 : s.N;
          const LayerTensors t = l->tensors();
          info.dtype = std::string(safetensors_dtype_name(t.scales->dtype));
          info.scheme = std::string(scheme_name(l->kind()));
        }
        const int64_t want_K = down ? info.intermediate : info.hidden;
        const int64_t want_N = down ? info.hidden : (stacked_ ? 2 : 1) * info.intermediate;
        if (s.K != want_K || s.N != want_N)
          throw Error(fmt::format(
              "MoE block {}: {} has K = {}, N = {}, expected K = {}, N = {} (hidden {} and "
              "intermediate {} from {})",
              q(), detail::name_text(l->name()), s.K, s.N, want_K, want_N, info.hidden,
              info.intermediate, detail::name_text(layers_[0][0]->name())));
        const detail::StoredZeros z =
            detail::stored_zeros(*l->tensors().qzeros, l->kind(), format.params.bits, s.N);
        (down ? info.w2_symmetric : info.w13_symmetric) &= z.symmetric;
        (down ? w2_stored_max : w13_stored_max) |= z.v1_stored_max > 0;
        info.act_order = info.act_order || l->act_order();
        info.bytes += s.bytes;
      }
    }
    info.w13_max_zero = detail::known_max_zero(info.w13_bits, info.w13_symmetric, w13_stored_max);
    info.w2_max_zero = detail::known_max_zero(info.w2_bits, info.w2_symmetric, w2_stored_max);
    return info;
  }

  /// Expert e in the form MoE kernels take: w13 [2I][K] (gate rows first) and w2 [K][I].
  std::pair<CanonicalWeight, CanonicalWeight> decode(int e) const {
    const auto& ex = layers_.at(size_t(e));
    if (stacked_) return {ex[0]->decode(), ex[1]->decode()};
    return {detail::fuse_w13(ex[0]->decode(), ex[1]->decode(),
                             fmt::format("MoE block {} expert {}", q(), e)),
            ex[2]->decode()};
  }

 private:
  struct Stack {
    const char* part;
    std::optional<TensorView> qweight, qzeros, scales, g_idx, bias;
  };

  std::string q() const { return detail::name_text(name_); }

  // Views of one stacked weight, each checked to be [E, ...] over the experts of its qweight.
  Stack stack(const QuantTensors& t, const char* part) const {
    const std::string prefix = name_ + "." + part;
    const std::string label = detail::tensors_label(name_);
    Stack s{part, {}, {}, {}, {}, {}};
    if (!t.qweight)
      throw Error(
          fmt::format("tensor {} is missing for MoE block {} (stacked form: w13 and w2 "
                      "each need qweight, qzeros and scales)",
                      detail::name_text(prefix + ".qweight"), q()));
    auto view = [&](const DLTensor* d, const char* suffix, size_t rank,
                    const TensorView* experts_of) -> std::optional<TensorView> {
      if (!d) return std::nullopt;
      TensorView v = detail::dlpack_view(*d, prefix + "." + suffix, label);
      if (v.shape.size() != rank || v.shape[0] < 1 ||
          (experts_of && v.shape[0] != experts_of->shape[0]))
        throw Error(fmt::format(
            "tensor {} in {} has shape {}, expected a {}-D tensor [E, ...] stacked over {}",
            detail::name_text(v.name), label, v.shape_string(), rank,
            experts_of
                ? fmt::format("the E = {} experts of {} {}", experts_of->shape[0],
                              detail::name_text(experts_of->name), experts_of->shape_string())
                : std::string("at least one expert")));
      return v;
    };
    s.qweight = view(t.qweight, "qweight", 3, nullptr);
    const TensorView* E = &*s.qweight;
    s.qzeros = view(t.qzeros, "qzeros", 3, E);
    s.scales = view(t.scales, "scales", 3, E);
    s.g_idx = view(t.g_idx, "g_idx", 2, E);
    s.bias = view(t.bias, "bias", 2, E);
    return s;
  }

  std::string name_;
  bool stacked_ = false;
  std::vector<std::array<std::unique_ptr<detail::EngineLayer>, 3>> layers_;
};

}  // namespace

MoeLayer Runtime::moe_from_tensors(const std::string& name, const MoeTensors& experts,
                                   const QuantFormat& format, const nibble_dense_weight* router,
                                   const MoeOptions& options) const {
  // What the schemes find wrong before the backend prepares (and while it pulls experts) is wrong
  // with the caller's tensors, format or options.
  auto checked = [](auto&& f) { return detail::with_error_kind<InvalidArgument>(f); };
  const detail::FormatScheme scheme = checked([&] { return detail::format_scheme(format, name); });
  if (options.top_k <= 0)
    throw InvalidArgument(
        fmt::format("MoE block {}: top_k = {}; expected the experts per token (> 0), "
                    "which no checkpoint config gives here",
                    detail::name_text(name), options.top_k));
  EngineExperts layers = checked([&] { return EngineExperts(name, experts); });
  std::vector<std::string> warnings;
  const MoeInfo info = checked([&] { return layers.describe(scheme, warnings); });
  for (const auto& w : warnings) log(LogLevel::Warning, "core", w);
  const detail::MoeRouting routing =
      detail::moe_routing(name, options, info.num_experts, 0, false, "softmax");
  MoeLayer layer;
  layer.num_experts_ = info.num_experts;
  layer.hidden_ = info.hidden;
  layer.top_k_ = routing.top_k;
  layer.renormalize_ = routing.renormalize;
  layer.sigmoid_ = routing.sigmoid;
  if (router) {
    if (router->N != info.num_experts || router->K != info.hidden)
      throw InvalidArgument(fmt::format(
          "MoE block {}: router weight is [{}, {}], expected [{}, {}] "
          "(experts, hidden)",
          detail::name_text(name), router->N, router->K, info.num_experts, info.hidden));
    layer.router_ = dense(name + ".router", *router).op_;
  }
  layer.experts_ = detail::prepare_experts(
      *this, info, layer.top_k_, [&](int e) { return checked([&] { return layers.decode(e); }); });
  return layer;
}

}  // namespace nibble
