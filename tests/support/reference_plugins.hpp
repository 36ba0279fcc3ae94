// A gtest fixture base for the tests that hold the reference plugins (npu_ref, gpu_ref) to the
// float64 reference: both are loaded once per test program and kept to its end.
#pragma once

#include <gtest/gtest.h>

#include "plugin_harness.hpp"

namespace nibble::test {

/// `Base` is ::testing::Test or a ::testing::TestWithParam<P>.
template <class Base = ::testing::Test>
class ReferencePluginsTest : public Base {
 protected:
  /// Load both plugins unless an earlier suite did.
  static void SetUpTestSuite() {
    if (!npu) npu = new HarnessPlugin("npu_ref");
    if (!gpu) gpu = new HarnessPlugin("gpu_ref");
  }
  static inline HarnessPlugin* npu = nullptr;
  static inline HarnessPlugin* gpu = nullptr;
};

}  // namespace nibble::test
