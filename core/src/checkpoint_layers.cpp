// MoE block discovery, the layer listings and decoding (checkpoint.cpp opens and discovers).
#include <nibble/checkpoint.hpp>
#include <nibble/error.hpp>
#include <nibble/sdk/numeric.hpp>

#include <fmt/format.h>

#include <nibble/untrusted_text.hpp>

#include <cstring>

#include "error_kind.hpp"
#include "schemes/fuse_w13.hpp"
#include "schemes/stored_zeros.hpp"
#include "text/name_text.hpp"

namespace nibble {

namespace {

std::string q(const std::string& name) { return detail::name_text(name); }

// The whole number config.json states for `key`, checked to lie in [lo, hi]; nullopt when the key
// is absent or null. A value of another type or out of range is refused, never read as absent.
std::optional<int64_t> config_int(const nlohmann::json& config, const char* key, int64_t lo,
                                  int64_t hi, const std::string& source) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::nullopt;
  const bool in_range =
      it->is_number_unsigned()
          ? it->get<uint64_t>() <= uint64_t(hi) && int64_t(it->get<uint64_t>()) >= lo
      : it->is_number_integer() ? it->get<int64_t>() >= lo && it->get<int64_t>() <= hi
                                : false;
  if (!in_range) {
    throw Error(fmt::format("{}: {} = {} is not a whole number in [{}, {}]", source, key,
                            escape_untrusted(it->dump(), 100), lo, hi));
  }
  return it->get<int64_t>();
}

}  // namespace

void Checkpoint::discover_moe(
    std::map<std::string, std::map<int, std::map<std::string, std::string>>>& found) {
  for (auto& entry : found) {
    const std::string& prefix = entry.first;  // named, not bound: lambdas below capture it
    const auto& experts = entry.second;
    MoeBlock block;
    MoeInfo& info = block.info;
    info.prefix = prefix;
    bool qwen = false, mixtral = false;
    for (const auto& [e, projs] : experts) {
      for (const auto& [name, p] : projs) (name.starts_with("w") ? mixtral : qwen) = true;
    }
    if (qwen && mixtral) {
      throw Error(
          fmt::format("MoE block {} mixes Qwen-style (gate_proj/up_proj/down_proj) and "
                      "Mixtral-style (w1/w3/w2) expert names",
                      q(prefix)));
    }
    info.style = qwen ? MoeStyle::Qwen : MoeStyle::Mixtral;
    const std::array<const char*, 3> names =
        qwen ? std::array<const char*, 3>{"gate_proj", "up_proj", "down_proj"}
             : std::array<const char*, 3>{"w1", "w3", "w2"};
    info.num_experts = experts.rbegin()->first + 1;
    for (int e = 0; e < info.num_experts; ++e) {
      std::array<std::string, 3> prefixes;
      for (int j = 0; j < 3; ++j) {
        std::string p = fmt::format("{}.experts.{}.{}", prefix, e, names[size_t(j)]);
        if (!quantized_.count(p) && !dense_.count(p)) {
          throw Error(fmt::format("MoE block {}: expert {} has no {} (expected {} or {} in {})",
                                  q(prefix), e, names[size_t(j)], q(p + ".qweight"),
                                  q(p + ".weight"), store_.source()));
        }
        prefixes[size_t(j)] = p;
        expert_prefixes_.insert(p);
      }
      block.experts.push_back(prefixes);
    }
    // Every expert must look like expert 0; w13 (gate, up) and w2 (down) are checked separately.
    auto describe = [&](const std::string& p) -> const LayerInfo& {
      return quantized_.count(p) ? quantized_.at(p).info : dense_.at(p).info;
    };
    const LayerInfo& gate0 = describe(block.experts[0][0]);
    const LayerInfo& down0 = describe(block.experts[0][2]);
    info.hidden = gate0.K;
    info.intermediate = gate0.N;
    info.scheme = gate0.scheme;
    info.w13_bits = gate0.bits;
    info.w13_group_size = gate0.group_size;
    info.w2_bits = down0.bits;
    info.w2_group_size = down0.group_size;
    info.dtype = gate0.dtype;
    info.w13_symmetric = info.w2_symmetric = true;
    bool w13_stored_max = false, w2_stored_max = false;
    for (const auto& ex : block.experts) {
      for (int j = 0; j < 3; ++j) {
        const LayerInfo& l = describe(ex[size_t(j)]);
        const LayerInfo& ref = j == 2 ? down0 : gate0;
        int64_t want_K = j == 2 ? info.intermediate : info.hidden;
        int64_t want_N = j == 2 ? info.hidden : info.intermediate;
        if (l.K != want_K || l.N != want_N) {
          throw Error(fmt::format("MoE block {}: {} has K={} N={}, expected K={} N={} (from {})",
                                  q(prefix), q(ex[size_t(j)]), l.K, l.N, want_K, want_N,
                                  q(block.experts[0][0])));
        }
        if (l.scheme != ref.scheme || l.bits != ref.bits || l.group_size != ref.group_size) {
          throw Error(
              fmt::format("MoE block {}: {} is {} bits={} group_size={}, but {} is {} bits={} "
                          "group_size={}; experts must agree per weight (w13, w2)",
                          q(prefix), q(ex[size_t(j)]), l.scheme, l.bits, l.group_size,
                          q(j == 2 ? block.experts[0][2] : block.experts[0][0]), ref.scheme,
                          ref.bits, ref.group_size));
        }
        info.act_order = info.act_order || l.act_order;
        info.bytes += l.bytes;
        (j == 2 ? info.w2_symmetric : info.w13_symmetric) &= l.symmetric;
        (j == 2 ? w2_stored_max : w13_stored_max) |= l.stored_max_zeros > 0;
      }
    }
    info.w13_max_zero = detail::known_max_zero(info.w13_bits, info.w13_symmetric, w13_stored_max);
    info.w2_max_zero = detail::known_max_zero(info.w2_bits, info.w2_symmetric, w2_stored_max);
    info.router_prefix = prefix + ".gate";
    if (quantized_.count(info.router_prefix)) {
      throw Error(fmt::format("MoE block {}: router {} is quantized; nibble expects a dense router",
                              q(prefix), q(info.router_prefix)));
    }
    auto router = dense_.find(info.router_prefix);
    if (router == dense_.end()) {
      throw Error(fmt::format("MoE block {} has {} experts but no router tensor {} in {}",
                              q(prefix), info.num_experts, q(info.router_prefix + ".weight"),
                              store_.source()));
    }
    if (router->second.tensor.N != info.num_experts || router->second.tensor.K != info.hidden) {
      throw Error(fmt::format("tensor {} in {} has shape {}, expected [{}, {}] (experts, hidden)",
                              q(info.router_prefix + ".weight"), router->second.tensor.weight->file,
                              router->second.tensor.weight->shape_string(), info.num_experts,
                              info.hidden));
    }
    // config.json, when it states sizes, must agree with the tensors; a value it states is
    // checked (type and range), never taken as absent.
    const std::string source = escape_untrusted((dir_ / "config.json").string(), 400);
    constexpr int64_t kMaxSize = int64_t(1) << 31;
    auto agree = [&](const char* key, int64_t found_value, const char* what) {
      if (auto v = config_int(config_, key, 1, kMaxSize, source); v && *v != found_value) {
        throw Error(fmt::format("{} says {} = {}, but MoE block {} has {} = {}", source, key, *v,
                                q(prefix), what, found_value));
      }
    };
    agree(config_.contains("num_local_experts") ? "num_local_experts" : "num_experts",
          info.num_experts, "experts");
    agree("hidden_size", info.hidden, "hidden size");
    agree(qwen ? "moe_intermediate_size" : "intermediate_size", info.intermediate,
          "expert intermediate size");
    info.top_k =
        int(config_int(config_, "num_experts_per_tok", 1, info.num_experts, source).value_or(0));
    auto norm = config_.find("norm_topk_prob");
    if (norm != config_.end() && !norm->is_null() && !norm->is_boolean()) {
      throw Error(fmt::format("{}: norm_topk_prob = {} must be true or false", source,
                              escape_untrusted(norm->dump(), 100)));
    }
    info.norm_topk_prob = norm != config_.end() && norm->is_boolean()
                              ? norm->get<bool>()
                              : info.style == MoeStyle::Mixtral;
    auto scoring = config_.find("scoring_func");
    if (scoring != config_.end() && !scoring->is_null()) {
      if (!scoring->is_string()) {
        throw Error(fmt::format("{}: scoring_func = {} must be a string (softmax or sigmoid)",
                                source, escape_untrusted(scoring->dump(), 100)));
      }
      info.scoring = scoring->get<std::string>();
    }
    moe_.emplace(prefix, std::move(block));
  }
}

std::vector<LayerInfo> Checkpoint::linear_layers() const {
  std::map<std::string, LayerInfo> sorted;
  for (const auto& [p, l] : quantized_) {
    if (!expert_prefixes_.count(p)) sorted.emplace(p, l.info);
  }
  for (const auto& [p, l] : dense_) {
    if (!expert_prefixes_.count(p)) sorted.emplace(p, l.info);
  }
  std::vector<LayerInfo> out;
  for (auto& [p, info] : sorted) out.push_back(std::move(info));
  return out;
}

std::vector<MoeInfo> Checkpoint::moe_blocks() const {
  std::vector<MoeInfo> out;
  for (const auto& [p, b] : moe_) out.push_back(b.info);
  return out;
}

const Checkpoint::QuantLayer& Checkpoint::quant_layer(const std::string& prefix) const {
  auto it = quantized_.find(prefix);
  if (it != quantized_.end()) return it->second;
  if (dense_.count(prefix)) {
    throw InvalidArgument(fmt::format("layer {} in {} is dense (not quantized); use dense_weight()",
                                      q(prefix), store_.source()));
  }
  throw InvalidArgument(fmt::format("no quantized layer {} in {} (no tensor {})", q(prefix),
                                    store_.source(), q(prefix + ".qweight")));
}

const Checkpoint::MoeBlock& Checkpoint::moe_block(const std::string& prefix) const {
  auto it = moe_.find(prefix);
  if (it == moe_.end())
    throw InvalidArgument(fmt::format("no MoE block {} in {}", q(prefix), store_.source()));
  return it->second;
}

CanonicalWeight Checkpoint::decode_linear(const std::string& prefix) const {
  const QuantLayer& l = quant_layer(prefix);
  return detail::with_error_kind<CheckpointError>(
      [&] { return get_scheme(l.kind).decode(l.tensors, l.params); });
}

DenseTensor Checkpoint::dense_weight(const std::string& prefix) const {
  auto it = dense_.find(prefix);
  if (it != dense_.end()) return it->second.tensor;
  if (quantized_.count(prefix)) {
    throw InvalidArgument(fmt::format("layer {} in {} is quantized; use decode_linear()", q(prefix),
                                      store_.source()));
  }
  throw InvalidArgument(fmt::format("no dense layer {} in {} (no 2-D float tensor {})", q(prefix),
                                    store_.source(), q(prefix + ".weight")));
}

std::pair<CanonicalWeight, CanonicalWeight> Checkpoint::decode_expert(const std::string& moe_prefix,
                                                                      int e) const {
  const MoeBlock& b = moe_block(moe_prefix);
  if (e < 0 || e >= b.info.num_experts) {
    throw InvalidArgument(fmt::format("MoE block {}: expert {} is outside [0, {})", q(moe_prefix),
                                      e, b.info.num_experts));
  }
  const auto& ex = b.experts[size_t(e)];
  if (b.info.scheme == "dense") {
    throw Unsupported(fmt::format("MoE block {}: experts are not quantized (dense {})",
                                  q(moe_prefix), q(ex[0] + ".weight")));
  }
  CanonicalWeight gate = decode_linear(ex[0]);
  CanonicalWeight up = decode_linear(ex[1]);
  CanonicalWeight down = decode_linear(ex[2]);
  return detail::with_error_kind<CheckpointError>([&] {
    return std::pair{detail::fuse_w13(std::move(gate), up,
                                      fmt::format("MoE block {} expert {}", q(moe_prefix), e)),
                     std::move(down)};
  });
}

}  // namespace nibble
