// Test plugin whose C++ backend constructor throws: the SDK must turn it into a status.
#include <nibble/sdk/plugin.hpp>

#include <stdexcept>

struct Throws : nibble::sdk::Backend {
  static constexpr const char* name = "throws";
  static constexpr const char* version = "1.0.0";
  static constexpr const char* vendor = "nibble tests";
  static constexpr const char* description = "throws from its constructor";
  Throws() { throw std::runtime_error("backend constructor exploded"); }
  std::vector<std::unique_ptr<nibble::sdk::Kernel>> make_kernels() override { return {}; }
};
NIBBLE_PLUGIN(Throws)
