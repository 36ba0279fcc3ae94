// A plugin that lies: its kernel claims every group size but computes group size 64 wrong (5 %
// off). The conformance kit must fail it and name group 64 — and only group 64.
#include "misbehaving_kernel.hpp"

namespace {

void wrong_for_group_64(const nibble_layer_desc& d, const nibble::sdk::ForwardArgs& a) {
  if (d.group_size != 64) return;
  for (int64_t m = 0; m < a.M; ++m)
    for (int64_t n = 0; n < a.y.cols; ++n) a.y.set(m, n, a.y.get(m, n) * 1.05f);
}

struct Liar : nibble::sdk::Backend {
  static constexpr const char* name = "liar";
  static constexpr const char* version = "1.0.0";
  static constexpr const char* vendor = "nibble tests";
  static constexpr const char* description = "claims group 64, computes it wrong";
  std::vector<std::unique_ptr<nibble::sdk::Kernel>> make_kernels() override {
    std::vector<std::unique_ptr<nibble::sdk::Kernel>> k;
    k.push_back(std::make_unique<conformance_test_plugins::ScalarLinear>(&wrong_for_group_64));
    return k;
  }
};

}  // namespace

NIBBLE_PLUGIN(Liar)
