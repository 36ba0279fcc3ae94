// Test backend "beta": low priority, any K.
#include "scalar_linear.hpp"

struct Beta : nibble::sdk::Backend {
  static constexpr const char* name = "beta";
  static constexpr const char* version = "1.0.0";
  static constexpr const char* vendor = "nibble tests";
  static constexpr const char* description = "test backend, any K";
  std::vector<std::unique_ptr<nibble::sdk::Kernel>> make_kernels() override {
    std::vector<std::unique_ptr<nibble::sdk::Kernel>> k;
    k.push_back(std::make_unique<test_plugins::ScalarLinear>("scalar", 10, 1, 2000.f));
    return k;
  }
};
NIBBLE_PLUGIN(Beta)
