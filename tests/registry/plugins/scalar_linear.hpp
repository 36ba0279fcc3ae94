// A plain scalar linear kernel for the registry's test plugins: dequantize, accumulate in double.
// Its admission rule is configurable so tests can steer selection (a K multiple, a bits set).
#pragma once

#include <nibble/sdk/plugin.hpp>
#include <nibble/sdk/weights.hpp>

#include <memory>
#include <string>
#include <vector>

namespace test_plugins {

class ScalarPrepared : public nibble::sdk::Prepared {
 public:
  ScalarPrepared(const nibble::sdk::QuantWeight& w, float tag) : tag_(tag) {
    K_ = w.K();
    N_ = w.N();
    weight_.resize(size_t(K_ * N_));
    for (int64_t n = 0; n < N_; ++n)
      for (int64_t k = 0; k < K_; ++k) weight_[size_t(n * K_ + k)] = w.dequant(n, k);
    bias_.resize(size_t(N_));
    for (int64_t n = 0; n < N_; ++n) bias_[size_t(n)] = w.bias(n);
  }
  size_t bytes() const override { return weight_.size() * sizeof(float); }
  void forward(const nibble::sdk::ForwardArgs& a, const nibble::sdk::Exec&) const override {
    for (int64_t m = 0; m < a.M; ++m)
      for (int64_t n = 0; n < N_; ++n) {
        double acc = bias_[size_t(n)];
        for (int64_t k = 0; k < K_; ++k) acc += double(a.x.get(m, k)) * weight_[size_t(n * K_ + k)];
        a.y.set(m, n, float(acc) + tag_);
      }
  }

 private:
  int64_t K_ = 0, N_ = 0;
  std::vector<float> weight_, bias_;
  float tag_;
};

// tag is added to every output so tests can tell which plugin ran (0 for honest results).
class ScalarLinear : public nibble::sdk::Kernel {
 public:
  ScalarLinear(std::string name, int priority, int k_multiple, float tag = 0.f)
      : name_(std::move(name)), priority_(priority), k_multiple_(k_multiple), tag_(tag) {}
  nibble::sdk::KernelInfo info() const override {
    return {name_, NIBBLE_OP_LINEAR, priority_, NIBBLE_MODE_W4A16, 1e-6, 1e-3, 1e-2};
  }
  std::string why_not(const nibble_layer_desc& d) const override {
    if (d.op != NIBBLE_OP_LINEAR) return "only quantized linear layers";
    if (d.K % k_multiple_ != 0)
      return "K=" + std::to_string(d.K) + " is not a multiple of " + std::to_string(k_multiple_);
    return "";
  }
  std::unique_ptr<nibble::sdk::Prepared> prepare(const nibble_layer_desc&,
                                                 const nibble_weight_input& in) const override {
    return std::make_unique<ScalarPrepared>(nibble::sdk::QuantWeight(*in.quantized, "weight"),
                                            tag_);
  }

 private:
  std::string name_;
  int priority_;
  int k_multiple_;
  float tag_;
};

}  // namespace test_plugins
