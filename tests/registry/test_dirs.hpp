// Where the registry tests find their test plugins.
#pragma once

#include <nibble/options.hpp>

#include <initializer_list>
#include <string>

namespace nibble::test {

/// The directory holding test plugin `name` (built by tests/registry/plugins).
inline std::string test_plugin_dir(const std::string& name) {
  return std::string(NIBBLE_TEST_PLUGIN_DIR) + "/" + name;
}

/// Options that search exactly the given test plugin directories.
inline RuntimeOptions only_test_plugins(std::initializer_list<const char*> names) {
  RuntimeOptions o;
  o.use_default_plugin_dir = false;
  for (const char* n : names) o.plugin_dirs.push_back(test_plugin_dir(n));
  return o;
}

}  // namespace nibble::test
