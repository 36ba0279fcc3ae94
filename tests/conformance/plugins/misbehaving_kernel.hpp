// A scalar quantized linear kernel (dequantize, accumulate in double) with one hook that lets a
// test plugin misbehave in one configuration, so a test can check that the conformance kit
// catches exactly that configuration.
#pragma once

#include <nibble/sdk/plugin.hpp>
#include <nibble/sdk/weights.hpp>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace conformance_test_plugins {

/// Called after an honest forward: may corrupt the output, crash, throw, ...
using Misbehaviour = std::function<void(const nibble_layer_desc&, const nibble::sdk::ForwardArgs&)>;

class ScalarPrepared : public nibble::sdk::Prepared {
 public:
  ScalarPrepared(const nibble::sdk::QuantWeight& w, Misbehaviour misbehave)
      : K_(w.K()), N_(w.N()), misbehave_(std::move(misbehave)) {
    weight_.resize(size_t(K_ * N_));
    bias_.resize(size_t(N_));
    for (int64_t n = 0; n < N_; ++n) {
      for (int64_t k = 0; k < K_; ++k) weight_[size_t(n * K_ + k)] = w.dequant(n, k);
      bias_[size_t(n)] = w.bias(n);
    }
  }
  size_t bytes() const override { return (weight_.size() + bias_.size()) * sizeof(float); }
  void forward(const nibble::sdk::ForwardArgs& a, const nibble::sdk::Exec&) const override {
    for (int64_t m = 0; m < a.M; ++m)
      for (int64_t n = 0; n < N_; ++n) {
        double acc = bias_[size_t(n)];
        for (int64_t k = 0; k < K_; ++k) acc += double(a.x.get(m, k)) * weight_[size_t(n * K_ + k)];
        a.y.set(m, n, float(acc));
      }
    if (misbehave_) misbehave_(desc(), a);
  }

 private:
  int64_t K_, N_;
  std::vector<float> weight_, bias_;
  Misbehaviour misbehave_;
};

/// Claims every 4- and 8-bit linear layer.
class ScalarLinear : public nibble::sdk::Kernel {
 public:
  explicit ScalarLinear(Misbehaviour misbehave) : misbehave_(std::move(misbehave)) {}
  nibble::sdk::KernelInfo info() const override {
    return {"scalar_linear", NIBBLE_OP_LINEAR, 1, NIBBLE_MODE_W4A16, 1e-6, 1e-3, 8e-3};
  }
  std::string why_not(const nibble_layer_desc& d) const override {
    if (d.op != NIBBLE_OP_LINEAR) return "only quantized linear layers";
    if (d.numeric_mode != NIBBLE_MODE_W4A16) return "w4a16 numerics only";
    if (d.bits != 4 && d.bits != 8) return "bits " + std::to_string(d.bits) + " (4 or 8 only)";
    if (d.group_size == 0 || d.group_size < -1) return "group size " + std::to_string(d.group_size);
    if (d.K <= 0 || d.N <= 0) return "empty layer";
    if (!nibble::sdk::is_float_dtype(d.weight_dtype)) return "scales must be f32, f16 or bf16";
    if (d.act_dtypes & ~uint32_t(NIBBLE_DTYPE_F32 | NIBBLE_DTYPE_F16 | NIBBLE_DTYPE_BF16))
      return "unknown activation dtype";
    return "";
  }
  std::unique_ptr<nibble::sdk::Prepared> prepare(const nibble_layer_desc&,
                                                 const nibble_weight_input& in) const override {
    return std::make_unique<ScalarPrepared>(nibble::sdk::QuantWeight(*in.quantized, "weight"),
                                            misbehave_);
  }

 private:
  Misbehaviour misbehave_;
};

}  // namespace conformance_test_plugins
