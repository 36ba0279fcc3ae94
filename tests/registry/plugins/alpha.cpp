// Test backend "alpha": high priority, but only layers whose K is a multiple of 64.
#include "scalar_linear.hpp"

struct Alpha : nibble::sdk::Backend {
  static constexpr const char* name = "alpha";
  static constexpr const char* version = "1.0.0";
  static constexpr const char* vendor = "nibble tests";
  static constexpr const char* description = "test backend, K % 64 == 0 only";
  std::vector<std::unique_ptr<nibble::sdk::Kernel>> make_kernels() override {
    std::vector<std::unique_ptr<nibble::sdk::Kernel>> k;
    k.push_back(std::make_unique<test_plugins::ScalarLinear>("scalar64", 50, 64, 1000.f));
    return k;
  }
};
NIBBLE_PLUGIN(Alpha)
