// A plugin that hangs (sleeps for ever) on 8-bit group-32 layers. The kit must stop it at
// --timeout and report the check that was running, instead of hanging itself.
#include <chrono>
#include <thread>

#include "misbehaving_kernel.hpp"

namespace {

void hang_on_8bit_group_32(const nibble_layer_desc& d, const nibble::sdk::ForwardArgs&) {
  if (d.bits == 8 && d.group_size == 32)
    for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
}

struct Hanger : nibble::sdk::Backend {
  static constexpr const char* name = "hanger";
  static constexpr const char* version = "1.0.0";
  static constexpr const char* vendor = "nibble tests";
  static constexpr const char* description = "never returns on 8-bit group 32";
  std::vector<std::unique_ptr<nibble::sdk::Kernel>> make_kernels() override {
    std::vector<std::unique_ptr<nibble::sdk::Kernel>> k;
    k.push_back(std::make_unique<conformance_test_plugins::ScalarLinear>(&hang_on_8bit_group_32));
    return k;
  }
};

}  // namespace

NIBBLE_PLUGIN(Hanger)
