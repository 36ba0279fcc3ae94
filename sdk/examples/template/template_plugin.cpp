// The template backend: a scalar quantized linear kernel and a scalar MoE kernel, written the way
// a vendor starts a new backend. Copy this directory, rename "template", then replace the inner
// loops with your hardware's calls. See docs/writing-a-plugin.md.
#include <nibble/sdk/plugin.hpp>
#include <nibble/sdk/weights.hpp>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

namespace {

using nibble::sdk::Exec;
using nibble::sdk::ForwardArgs;
using nibble::sdk::QuantWeight;

// The dequantized weight in float, [N][K], plus the bias: the simplest possible "layout".
struct DequantizedWeight {
  int64_t K = 0, N = 0;
  std::vector<float> w, bias;
  explicit DequantizedWeight(const QuantWeight& q) : K(q.K()), N(q.N()) {
    w.resize(size_t(K * N));
    bias.resize(size_t(N));
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t k = 0; k < K; ++k) w[size_t(n * K + k)] = q.dequant(n, k);
      bias[size_t(n)] = q.bias(n);
    }
  }
  size_t bytes() const { return (w.size() + bias.size()) * sizeof(float); }
  // out[n] = Σ_k in[k] · W[n][k] (+ bias), accumulated in double for a tight error bound.
  void apply(const float* in, float* out, bool with_bias) const {
    for (int64_t n = 0; n < N; ++n) {
      double acc = with_bias ? bias[size_t(n)] : 0.0;
      const float* row = &w[size_t(n * K)];
      for (int64_t k = 0; k < K; ++k) acc += double(in[k]) * row[k];
      out[n] = float(acc);
    }
  }
};

class LinearPrepared : public nibble::sdk::Prepared {
 public:
  explicit LinearPrepared(const QuantWeight& q) : weight_(q) {}
  size_t bytes() const override { return weight_.bytes(); }
  void forward(const ForwardArgs& a, const Exec&) const override {
    std::vector<float> in(static_cast<size_t>(weight_.K)), out(static_cast<size_t>(weight_.N));
    for (int64_t m = 0; m < a.M; ++m) {
      for (int64_t k = 0; k < weight_.K; ++k) in[size_t(k)] = a.x.get(m, k);
      weight_.apply(in.data(), out.data(), true);
      for (int64_t n = 0; n < weight_.N; ++n) a.y.set(m, n, out[size_t(n)]);
    }
  }

 private:
  DequantizedWeight weight_;
};

class ScalarLinear : public nibble::sdk::Kernel {
 public:
  nibble::sdk::KernelInfo info() const override {
    // Bounds: double accumulation, so only the output's rounding to the activation dtype counts.
    return {"scalar_linear", NIBBLE_OP_LINEAR, 1, NIBBLE_MODE_W4A16, 1e-6, 1e-3, 8e-3};
  }
  std::string why_not(const nibble_layer_desc& d) const override {
    if (d.bits != 4 && d.bits != 8) return "bits " + std::to_string(d.bits) + " (4 or 8 only)";
    return "";
  }
  std::unique_ptr<nibble::sdk::Prepared> prepare(const nibble_layer_desc&,
                                                 const nibble_weight_input& in) const override {
    return std::make_unique<LinearPrepared>(QuantWeight(*in.quantized, "weight"));
  }
};

class MoePrepared : public nibble::sdk::Prepared {
 public:
  MoePrepared(const nibble_layer_desc& d, const nibble_moe_source& src) : K_(d.K), I_(d.N) {
    for (int32_t e = 0; e < src.num_experts; ++e) {
      nibble_canonical_weight w13{}, w2{};
      nibble_error err{};
      err.struct_size = sizeof err;
      if (src.get_expert(src.ctx, e, &w13, &w2, &err) != NIBBLE_OK)
        throw nibble::sdk::PluginError(NIBBLE_INVALID_ARGUMENT,
                                       "expert " + std::to_string(e) + ": " + err.message);
      w13_.emplace_back(QuantWeight(w13, "expert " + std::to_string(e) + " w13"));
      w2_.emplace_back(QuantWeight(w2, "expert " + std::to_string(e) + " w2"));
      src.put_expert(src.ctx, e);
      nibble::sdk::require(w13_.back().N == 2 * I_ && w13_.back().K == K_ && w2_.back().N == K_ &&
                               w2_.back().K == I_,
                           "expert " + std::to_string(e) + ": shapes do not match the layer");
    }
  }
  size_t bytes() const override {
    size_t b = 0;
    for (size_t e = 0; e < w13_.size(); ++e) b += w13_[e].bytes() + w2_[e].bytes();
    return b;
  }
  void forward(const ForwardArgs& a, const Exec&) const override {
    std::vector<float> in(static_cast<size_t>(K_)), gu(static_cast<size_t>(2 * I_)),
        h(static_cast<size_t>(I_)), down(static_cast<size_t>(K_));
    std::vector<double> acc(static_cast<size_t>(K_));
    for (int64_t m = 0; m < a.M; ++m) {
      for (int64_t k = 0; k < K_; ++k) in[size_t(k)] = a.x.get(m, k);
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t j = 0; j < a.topk_ids.cols; ++j) {
        int64_t e = a.topk_ids.get_int(m, j);
        if (e < 0) continue;  // this slot routes to no expert
        w13_[size_t(e)].apply(in.data(), gu.data(), false);
        for (int64_t i = 0; i < I_; ++i) {
          double g = gu[size_t(i)];
          h[size_t(i)] = float(g / (1.0 + std::exp(-g)) * gu[size_t(I_ + i)]);
        }
        w2_[size_t(e)].apply(h.data(), down.data(), false);
        double weight = a.topk_weights.get(m, j);
        for (int64_t k = 0; k < K_; ++k) acc[size_t(k)] += weight * down[size_t(k)];
      }
      for (int64_t k = 0; k < K_; ++k) a.y.set(m, k, float(acc[size_t(k)]));
    }
  }

 private:
  int64_t K_, I_;
  std::vector<DequantizedWeight> w13_, w2_;
};

class ScalarMoe : public nibble::sdk::Kernel {
 public:
  nibble::sdk::KernelInfo info() const override {
    // The expert's intermediate activation is held in f32: a little looser than the linear.
    return {"scalar_moe", NIBBLE_OP_MOE, 1, NIBBLE_MODE_W4A16, 1e-5, 1e-3, 8e-3};
  }
  std::string why_not(const nibble_layer_desc& d) const override {
    if (d.activation != NIBBLE_ACT_SILU) return "only the SiLU activation";
    if (d.bits != 4 && d.bits != 8) return "bits " + std::to_string(d.bits) + " (4 or 8 only)";
    return "";
  }
  std::unique_ptr<nibble::sdk::Prepared> prepare(const nibble_layer_desc& d,
                                                 const nibble_weight_input& in) const override {
    return std::make_unique<MoePrepared>(d, *in.experts);
  }
};

struct TemplateBackend : nibble::sdk::Backend {
  static constexpr const char* name = "template";
  static constexpr const char* version = "0.1.0";
  static constexpr const char* vendor = "you";
  static constexpr const char* description = "scalar reference kernels to start a backend from";
  nibble::sdk::Probe probe() override { return {true, 0, "portable C++; runs everywhere"}; }
  std::vector<std::unique_ptr<nibble::sdk::Kernel>> make_kernels() override {
    std::vector<std::unique_ptr<nibble::sdk::Kernel>> k;
    k.push_back(std::make_unique<ScalarLinear>());
    k.push_back(std::make_unique<ScalarMoe>());
    return k;
  }
};

}  // namespace

NIBBLE_PLUGIN(TemplateBackend)
