// Test plugin built through the C++ SDK against an older ABI minor (NIBBLE_ABI_MINOR, set by the
// build: 0 for "older", 1 for "older11", 2 for "older12"), without the later minors' appended
// fields: the host must fill the missing fields with defaults (a CPU kernel, no device memory)
// and enter it once per process (once per registry from 1.2, which has loads).
#include "scalar_linear.hpp"

#define OLDER_STRING(x) #x
#define OLDER_NAME_STRING(x) OLDER_STRING(x)

struct Older : nibble::sdk::Backend {
  static constexpr const char* name = OLDER_NAME_STRING(OLDER_NAME);
  static constexpr const char* version = "1.0.0";
  static constexpr const char* vendor = "nibble tests";
  static constexpr const char* description = "built for an older ABI minor";
  std::vector<std::unique_ptr<nibble::sdk::Kernel>> make_kernels() override {
    std::vector<std::unique_ptr<nibble::sdk::Kernel>> k;
    k.push_back(std::make_unique<test_plugins::ScalarLinear>("scalar", 1, 1, 0.f));
    return k;
  }
};
NIBBLE_PLUGIN(Older)
