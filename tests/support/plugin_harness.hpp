// Test support: drive a plugin through its C ABI alone, the way a host does, without libnibble:
// the SDK's host layer (nibble/sdk/host.hpp) with status-returning forms the tests assert on.
#pragma once

#include <nibble/sdk/host.hpp>
#include <nibble/sdk/numeric.hpp>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "reference.hpp"

namespace nibble::test {

using sdk::host::ErrorBuffer;

/// The build tree's plugin directory (lib/nibble/plugins).
inline std::string plugin_build_dir() {
  const char* env = std::getenv("NIBBLE_BUILD_DIR");
  return (env ? std::string(env) : std::string(NIBBLE_BUILD_DIR)) + "/lib/nibble/plugins";
}

/// A plugin loaded straight through dlopen, with its descriptor.
class HarnessPlugin {
 public:
  /// Load libnibble_<name>.so from the build tree's plugin directory (or `path` if given).
  explicit HarnessPlugin(const std::string& name, std::string path = "")
      : loaded_(sdk::host::LoadedPlugin::load(
            path.empty() ? plugin_build_dir() + "/libnibble_" + name + ".so" : path, 2)) {}
  HarnessPlugin(const HarnessPlugin&) = delete;

  /// The descriptor the plugin filled.
  const nibble_plugin& plugin() const { return loaded_.descriptor(); }
  /// The kernel called `name`, or nullptr.
  const nibble_kernel* kernel(const std::string& name) const { return loaded_.kernel(name); }
  /// Every kernel of an op.
  std::vector<const nibble_kernel*> kernels(nibble_op op) const {
    std::vector<const nibble_kernel*> out;
    for (const nibble_kernel* k : loaded_.kernels())
      if (k->op == op) out.push_back(k);
    return out;
  }

 private:
  sdk::host::LoadedPlugin loaded_;
};

/// Why `k` cannot implement `d` ("" when it can).
inline std::string why_not(const nibble_kernel* k, const nibble_layer_desc& d) {
  std::string reason;
  return sdk::host::can_implement(k, d, &reason) ? std::string() : reason;
}

/// A prepared weight that releases itself, with forward answering a status.
class PreparedLayer {
 public:
  explicit PreparedLayer(sdk::host::Prepared p) : p_(std::move(p)) {}

  /// Run forward with a fresh workspace; returns the status and fills *message on failure.
  nibble_status forward(const DLTensor* x, DLTensor* y, const DLTensor* ids = nullptr,
                        const DLTensor* weights = nullptr, int threads = 2,
                        std::string* message = nullptr) const {
    sdk::host::Workspace ws;
    return sdk::host::status_of(
        [&] {
          p_.forward(sdk::host::forward_args(*x, *y, ids, weights), x->shape[0], threads, ws);
        },
        message);
  }
  /// Bytes the prepared weight holds (0 when the kernel does not say).
  size_t bytes() const { return p_.bytes(); }

 private:
  sdk::host::Prepared p_;
};

/// Prepare a quantized linear weight; throws sdk::host::CallError with the plugin's message.
inline std::unique_ptr<PreparedLayer> prepare_linear(const nibble_kernel* k,
                                                     const nibble_layer_desc& d,
                                                     const CanonicalWeight& w) {
  const nibble_canonical_weight view = w.view();
  return std::make_unique<PreparedLayer>(
      sdk::host::prepare(k, d, sdk::host::quantized_input(view)));
}

/// Prepare MoE experts through a nibble_moe_source over `ex`; throws sdk::host::CallError.
inline std::unique_ptr<PreparedLayer> prepare_moe(const nibble_kernel* k,
                                                  const nibble_layer_desc& d,
                                                  const TestExperts& ex) {
  sdk::host::ExpertViews views = expert_views(ex);
  return std::make_unique<PreparedLayer>(
      sdk::host::prepare(k, d, sdk::host::experts_input(views.source())));
}

}  // namespace nibble::test
