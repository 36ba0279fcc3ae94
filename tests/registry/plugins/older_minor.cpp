// Test plugin built against ABI minor 0 (the 1.0 layout, without 1.1's appended fields) through
// the C++ SDK: the host must fill the missing fields with defaults.
#define NIBBLE_ABI_MINOR 0
#include "scalar_linear.hpp"

struct Older : nibble::sdk::Backend {
  static constexpr const char* name = "older";
  static constexpr const char* version = "1.0.0";
  static constexpr const char* vendor = "nibble tests";
  static constexpr const char* description = "built for ABI 1.0";
  std::vector<std::unique_ptr<nibble::sdk::Kernel>> make_kernels() override {
    std::vector<std::unique_ptr<nibble::sdk::Kernel>> k;
    k.push_back(std::make_unique<test_plugins::ScalarLinear>("scalar", 1, 1, 0.f));
    return k;
  }
};
NIBBLE_PLUGIN(Older)
