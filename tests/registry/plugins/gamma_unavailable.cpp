// Test backend "gamma": its probe says the device is absent.
#include "scalar_linear.hpp"

struct Gamma : nibble::sdk::Backend {
  static constexpr const char* name = "gamma";
  static constexpr const char* version = "0.1.0";
  static constexpr const char* vendor = "nibble tests";
  static constexpr const char* description = "test backend whose device is missing";
  nibble::sdk::Probe probe() override {
    return {false, NIBBLE_PROBE_DEVICE_ABSENT, "no gamma accelerator found on this machine"};
  }
  std::vector<std::unique_ptr<nibble::sdk::Kernel>> make_kernels() override {
    std::vector<std::unique_ptr<nibble::sdk::Kernel>> k;
    k.push_back(std::make_unique<test_plugins::ScalarLinear>("scalar", 99, 1, 3000.f));
    return k;
  }
};
NIBBLE_PLUGIN(Gamma)
