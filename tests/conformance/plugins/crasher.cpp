// A plugin that crashes the process (SIGSEGV) on 8-bit group-32 layers. The kit must report a
// failed check naming that configuration and the signal, then carry on with the other checks.
#include <csignal>

#include "misbehaving_kernel.hpp"

namespace {

void crash_on_8bit_group_32(const nibble_layer_desc& d, const nibble::sdk::ForwardArgs&) {
  if (d.bits == 8 && d.group_size == 32) std::raise(SIGSEGV);
}

struct Crasher : nibble::sdk::Backend {
  static constexpr const char* name = "crasher";
  static constexpr const char* version = "1.0.0";
  static constexpr const char* vendor = "nibble tests";
  static constexpr const char* description = "dies of SIGSEGV on 8-bit group 32";
  std::vector<std::unique_ptr<nibble::sdk::Kernel>> make_kernels() override {
    std::vector<std::unique_ptr<nibble::sdk::Kernel>> k;
    k.push_back(std::make_unique<conformance_test_plugins::ScalarLinear>(&crash_on_8bit_group_32));
    return k;
  }
};

}  // namespace

NIBBLE_PLUGIN(Crasher)
