// Test plugin that counts its live loads (ABI 1.2 loads, one per registry): a load's Backend is
// made at the entry call and destroyed by shutdown2, and the probe reports "live loads: N", so a
// test sees when the host ends a load.
#include <atomic>

#include "scalar_linear.hpp"

namespace {

std::atomic<int> live_loads{0};

struct LoadCounter : nibble::sdk::Backend {
  static constexpr const char* name = "loadcount";
  static constexpr const char* version = "1.0.0";
  static constexpr const char* vendor = "nibble tests";
  static constexpr const char* description = "counts its live loads";
  LoadCounter() { ++live_loads; }
  ~LoadCounter() override { --live_loads; }
  nibble::sdk::Probe probe() override {
    return {true, 0, "live loads: " + std::to_string(live_loads.load())};
  }
  std::vector<std::unique_ptr<nibble::sdk::Kernel>> make_kernels() override {
    std::vector<std::unique_ptr<nibble::sdk::Kernel>> k;
    k.push_back(std::make_unique<test_plugins::ScalarLinear>("scalar", 1, 1, 0.f));
    return k;
  }
};

}  // namespace

NIBBLE_PLUGIN(LoadCounter)
