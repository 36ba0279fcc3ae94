// Helpers for the device tests: runtime options that add the mock device plugin to the in-tree
// ones, a synthetic checkpoint, and host matrices staged on a layer's device.
#pragma once

#include <nibble/quantize.hpp>
#include <nibble/runtime.hpp>
#include <nibble/sdk/host/device_staging.hpp>

#include <filesystem>
#include <string>

#include "layer_test_util.hpp"
#include "mock_stream.hpp"

namespace nibble::test {

/// The in-tree plugins and the mock device plugin, with `backend` and `device`.
inline RuntimeOptions with_mock(const std::string& backend, const std::string& device = "") {
  RuntimeOptions o = in_tree(backend);
  o.plugin_dirs.push_back(NIBBLE_MOCKDEV_DIR);
  o.device = device;
  return o;
}

/// A GPTQ v1 checkpoint (asymmetric, act-order, group 32, bias) with layers 0: K 256 → N 200 and
/// 1: K 136 → N 64, made once per process.
inline const std::filesystem::path& synthetic_checkpoint() {
  static const std::filesystem::path dir = [] {
    SyntheticSpec spec;
    spec.layers = {{256, 200}, {136, 64}};
    spec.bias = true;
    spec.seed = 11;
    QuantizeOptions q;
    q.group_size = 32;
    q.sym = false;
    q.act_order = true;
    auto d = scratch("device_gptq_v1");
    write_checkpoint(d, make_synthetic_model(spec, q, SchemeKind::GptqV1), SchemeKind::GptqV1, q);
    return d;
  }();
  return dir;
}

}  // namespace nibble::test
