// Whole models for the quantizer: synthetic ones, and unquantized checkpoints read from disk.
#include <nibble/checkpoint.hpp>
#include <nibble/error.hpp>
#include <nibble/quantize.hpp>
#include <nibble/sdk/numeric.hpp>

#include <fmt/format.h>

#include <cmath>
#include <set>

namespace nibble {

namespace {

// GPTQ v1 stores zero - 1: asymmetric v1 output must keep every zero >= 1.
QuantizeOptions options_for(QuantizeOptions o, SchemeKind format) {
  if (format == SchemeKind::AwqGemm) {
    if (o.sym) {
      throw Error(
          "quantize: AWQ GEMM checkpoints always carry zero points (zero_point: true); use "
          "asymmetric quantization (--asym) for --format awq");
    }
    if (o.act_order)
      throw Error("quantize: AWQ has no act-order; drop --act-order for --format awq");
    if (o.bits != 4)
      throw Error(fmt::format("quantize: AWQ GEMM is 4-bit only (bits={} asked)", o.bits));
  }
  o.min_zero = format == SchemeKind::GptqV1 && !o.sym ? 1 : 0;
  return o;
}

// Why a layer of this shape cannot be packed by `format`, or "" when it can.
std::string packing_problem(SchemeKind format, int bits, int64_t K, int64_t N) {
  const int64_t pack = 32 / bits;
  if (format == SchemeKind::AwqGemm) {
    return N % 8 ? fmt::format("AWQ GEMM needs N % 8 == 0 (N = {})", N) : "";
  }
  if (K % pack) return fmt::format("GPTQ {}-bit needs K % {} == 0 (K = {})", bits, pack, K);
  if (N % pack) return fmt::format("GPTQ {}-bit needs N % {} == 0 (N = {})", bits, pack, N);
  return "";
}

std::vector<float> normal_weights(std::mt19937_64& rng, int64_t N, int64_t K, double stddev) {
  std::normal_distribution<double> dist(0.0, stddev);
  std::vector<float> w(size_t(N * K));
  for (float& v : w) v = float(dist(rng));
  return w;
}

OwnedTensor f16_tensor(const std::vector<float>& values, std::vector<int64_t> shape) {
  OwnedTensor t = OwnedTensor::zeros(DType::F16, std::move(shape));
  for (size_t i = 0; i < values.size(); ++i)
    sdk::store_float(t.data.data(), sdk::dtype_f16(), i, values[i]);
  return t;
}

// The act-order permutation of a layer comes from its own generator, seeded by its name, so that
// gate and up projections of one expert (which share their input, hence GPTQ's Hessian order) get
// the same permutation and can be fused into one w13 with a single g_idx.
std::mt19937_64 permutation_rng(uint64_t seed, std::string prefix) {
  for (auto [from, to] : {std::pair{".up_proj", ".gate_proj"}, std::pair{".w3", ".w1"}}) {
    if (prefix.ends_with(from))
      prefix = prefix.substr(0, prefix.size() - std::string_view(from).size()) + to;
  }
  uint64_t h = seed ^ 0xcbf29ce484222325ull;
  for (unsigned char c : prefix) h = (h ^ c) * 0x100000001b3ull;  // FNV-1a
  return std::mt19937_64(h);
}

}  // namespace

QuantizedModel make_synthetic_model(const SyntheticSpec& spec, QuantizeOptions options,
                                    SchemeKind format) {
  options = options_for(options, format);
  std::mt19937_64 rng(spec.seed);
  QuantizedModel model;
  model.config["architectures"] = {"NibbleSynthetic"};
  model.config["model_type"] = "nibble_synthetic";
  model.config["torch_dtype"] = "float16";
  model.config["num_hidden_layers"] = spec.layers.size() + (spec.moe ? 1 : 0);
  model.config["nibble_synthetic_seed"] = spec.seed;
  const size_t total =
      spec.layers.size() + (spec.moe ? 3 * size_t(std::max(spec.moe->num_experts, 0)) : 0);
  auto done = [&](const std::string& prefix) {
    if (options.on_layer) options.on_layer(prefix, model.quantized.size(), total);
  };
  for (size_t i = 0; i < spec.layers.size(); ++i) {
    auto [K, N] = spec.layers[i];
    if (K <= 0 || N <= 0)
      throw Error(fmt::format("synthetic layer {}: shape {}x{} is empty", i, K, N));
    if (auto why = packing_problem(format, options.bits, K, N); !why.empty()) {
      throw Error(fmt::format("synthetic layer {} ({}x{}): {}", i, K, N, why));
    }
    auto w = normal_weights(rng, N, K, 1.0 / std::sqrt(double(K)));
    std::vector<float> bias;
    if (spec.bias) bias = normal_weights(rng, 1, N, 0.1);
    std::string prefix = fmt::format("model.layers.{}.linear", i);
    auto perm = permutation_rng(spec.seed, prefix);
    model.quantized[prefix] = quantize_rtn(w, N, K, options, perm, bias);
    done(prefix);
  }
  if (spec.moe) {
    const SyntheticMoe& m = *spec.moe;
    if (m.num_experts <= 0 || m.top_k <= 0 || m.top_k > m.num_experts) {
      throw Error(fmt::format("synthetic MoE: {} experts with top_k {} is not valid", m.num_experts,
                              m.top_k));
    }
    for (auto [K, N] : {std::pair{m.hidden, m.intermediate}, std::pair{m.intermediate, m.hidden}}) {
      if (auto why = packing_problem(format, options.bits, K, N); !why.empty()) {
        throw Error(fmt::format("synthetic MoE expert ({}x{}): {}", K, N, why));
      }
    }
    const std::string block = fmt::format("model.layers.{}.mlp", spec.layers.size());
    model.config["hidden_size"] = m.hidden;
    model.config["moe_intermediate_size"] = m.intermediate;
    model.config["num_experts"] = m.num_experts;
    model.config["num_experts_per_tok"] = m.top_k;
    model.config["norm_topk_prob"] = true;
    model.config["hidden_act"] = "silu";
    auto router = normal_weights(rng, m.num_experts, m.hidden, 1.0 / std::sqrt(double(m.hidden)));
    model.plain[block + ".gate.weight"] = f16_tensor(router, {m.num_experts, m.hidden});
    for (int e = 0; e < m.num_experts; ++e) {
      for (const char* proj : {"gate_proj", "up_proj", "down_proj"}) {
        bool down = std::string_view(proj) == "down_proj";
        int64_t K = down ? m.intermediate : m.hidden, N = down ? m.hidden : m.intermediate;
        auto w = normal_weights(rng, N, K, 1.0 / std::sqrt(double(K)));
        std::string prefix = fmt::format("{}.experts.{}.{}", block, e, proj);
        auto perm = permutation_rng(spec.seed, prefix);
        model.quantized[prefix] = quantize_rtn(w, N, K, options, perm);
        done(prefix);
      }
    }
  }
  if (model.quantized.empty())
    throw Error("synthetic model: no layers (give --layers and/or --moe)");
  return model;
}

QuantizedModel quantize_checkpoint(const std::filesystem::path& in, QuantizeOptions options,
                                   SchemeKind format, const std::vector<std::string>& skip) {
  options = options_for(options, format);
  Checkpoint src = Checkpoint::open(in);
  if (src.quant_config()) {
    throw Error(
        fmt::format("{} is already quantized ({}); quantize expects an f16/bf16/f32 "
                    "checkpoint",
                    in.string(), src.quant_config()->source));
  }
  QuantizedModel model;
  for (const auto& [k, v] : src.config().items()) model.config[k] = v;
  std::set<std::string> routers;
  std::set<std::string> candidates;
  for (const auto& moe : src.moe_blocks()) {
    routers.insert(moe.router_prefix);
    for (int e = 0; e < moe.num_experts; ++e) {
      for (const char* p : moe.style == MoeStyle::Qwen
                               ? std::array{"gate_proj", "up_proj", "down_proj"}
                               : std::array{"w1", "w3", "w2"}) {
        candidates.insert(fmt::format("{}.experts.{}.{}", moe.prefix, e, p));
      }
    }
  }
  for (const auto& l : src.linear_layers()) candidates.insert(l.prefix);
  std::set<std::string> consumed;
  for (const auto& prefix : candidates) {
    auto keep_dense = [&](const std::string& why) {
      model.notes.push_back(fmt::format("{} stays dense: {}", prefix, why));
      model.modules_to_not_convert.push_back(prefix);
    };
    if (routers.count(prefix)) continue;  // routers stay dense without a note: readers expect it
    bool skipped = prefix == "lm_head" || prefix.ends_with(".lm_head");
    for (const auto& s : skip)
      skipped = skipped || (!s.empty() && prefix.find(s) != std::string::npos);
    if (skipped) {
      if (!(prefix == "lm_head" || prefix.ends_with(".lm_head"))) keep_dense("in the skip list");
      continue;
    }
    DenseTensor d = src.dense_weight(prefix);
    if (auto why = packing_problem(format, options.bits, d.K, d.N); !why.empty()) {
      keep_dense(why);
      continue;
    }
    std::vector<float> w(size_t(d.N * d.K));
    for (size_t i = 0; i < w.size(); ++i) w[i] = float(d.weight->as_double(i));
    auto perm = permutation_rng(0, prefix);
    CanonicalWeight q = quantize_rtn(w, d.N, d.K, options, perm);
    if (d.bias) {  // keep the checkpoint's bias bytes and dtype exactly
      q.bias.assign(reinterpret_cast<const uint8_t*>(d.bias->data),
                    reinterpret_cast<const uint8_t*>(d.bias->data) + d.bias->nbytes);
      q.bias_dtype = to_dlpack(d.bias->dtype);
      consumed.insert(prefix + ".bias");
    }
    consumed.insert(prefix + ".weight");
    model.quantized[prefix] = std::move(q);
    if (options.on_layer) options.on_layer(prefix, model.quantized.size(), candidates.size());
  }
  for (const auto& name : src.tensors().names()) {
    if (consumed.count(name)) continue;
    const TensorView& t = src.tensors().tensor(name);
    OwnedTensor copy;
    copy.dtype = t.dtype;
    copy.shape = t.shape;
    copy.data.assign(t.data, t.data + t.nbytes);
    model.plain[name] = std::move(copy);
  }
  if (model.quantized.empty()) {
    throw Error(fmt::format("{}: found no linear layer to quantize", in.string()));
  }
  return model;
}

}  // namespace nibble
