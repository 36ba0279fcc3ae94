// A plugin loaded by a host that is not libnibble (the conformance kit, the bench, plugin tests):
// dlopen, the entry point called with a host table of this translation unit's ABI minor, and the
// questions a host asks of the descriptor (kernels, probe, can_implement). libnibble's own loader
// adds a preflight and a registry on top and does not use this. Header-only; link -ldl.
#pragma once

#include <nibble/sdk/plugin.h>
#include <nibble/sdk/host/abi_namespace.hpp>
#include <nibble/sdk/host/error.hpp>

#include <dlfcn.h>

#include <atomic>
#include <cstring>
#include <string>
#include <vector>

namespace nibble::sdk::host {
inline namespace NIBBLE_SDK_HOST_ABI_NAMESPACE {

/// The host table handed to plugins: this translation unit's ABI minor, a thread budget and a log
/// that drops what plugins say. One table per process, alive until it ends as the ABI requires;
/// the budget is the one last asked for.
inline const nibble_host* standalone_host(int thread_budget) {
  static std::atomic<int> budget{1};
  budget = thread_budget < 1 ? 1 : thread_budget;
  static const nibble_host table = [] {
    nibble_host h{};
    h.struct_size = sizeof h;
    h.abi_major = NIBBLE_ABI_MAJOR;
    h.abi_minor = NIBBLE_ABI_MINOR;
    h.host_version = "nibble-sdk-host";
    h.ctx = &budget;
    h.log = [](void*, int32_t, const char*, const char*) {};
#if NIBBLE_ABI_MINOR >= 1
    h.thread_budget = [](void* ctx) -> int32_t {
      return static_cast<std::atomic<int>*>(ctx)->load();
    };
#endif
    return h;
  }();
  return &table;
}

/// Call `entry` into `out` with a capacity of `capacity` bytes (at most sizeof *out), zero-filled
/// and stamped as the ABI asks; returns the status, with the plugin's text in *message.
inline nibble_status call_entry(nibble_plugin_entry_fn entry, const nibble_host* host,
                                nibble_plugin* out, uint32_t capacity, std::string* message) {
  std::memset(out, 0, capacity);
  out->struct_size = capacity;
  out->abi_major = NIBBLE_ABI_MAJOR;
  out->abi_minor = NIBBLE_ABI_MINOR;
  ErrorBuffer err;
  const nibble_status s = guard("nibble_plugin_entry", [&] { return entry(host, out, err.get()); });
  if (s != NIBBLE_OK && message) *message = err.text();
  return s;
}

/// dlopen `path` (RTLD_NOW | RTLD_LOCAL) and find its entry point; throws CallError (UNAVAILABLE)
/// naming the file and what went wrong. Never closed: the ABI forbids unloading a plugin.
inline nibble_plugin_entry_fn open_entry(const std::string& path) {
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* e = dlerror();
    throw CallError(NIBBLE_UNAVAILABLE, "dlopen", path + ": " + (e ? e : "unknown error"));
  }
  auto entry = reinterpret_cast<nibble_plugin_entry_fn>(dlsym(handle, NIBBLE_PLUGIN_ENTRY_SYMBOL));
  if (!entry)
    throw CallError(NIBBLE_UNAVAILABLE, "dlsym",
                    path + ": the library has no " NIBBLE_PLUGIN_ENTRY_SYMBOL " symbol");
  return entry;
}

/// Whether kernel `k` accepts `desc`; when not, *reason gets its text ("(empty reason)" when it
/// gave none). Throws an escaped CallError when a C++ exception leaves can_implement.
inline bool can_implement(const nibble_kernel* k, const nibble_layer_desc& desc,
                          std::string* reason = nullptr) {
  ErrorBuffer err;
  const int32_t ok = guard("can_implement", [&] { return k->can_implement(k, &desc, err.get()); });
  if (!ok && reason) *reason = err.text().empty() ? std::string("(empty reason)") : err.text();
  return ok != 0;
}

/// Every kernel `p` lists (empty when the table is missing).
inline std::vector<const nibble_kernel*> kernels_of(const nibble_plugin& p) {
  std::vector<const nibble_kernel*> out;
  if (!p.kernels) return out;
  for (uint32_t i = 0; i < p.kernel_count; ++i) out.push_back(p.kernels[i]);
  return out;
}

/// A loaded plugin: its entry point and the descriptor it filled.
class LoadedPlugin {
 public:
  /// Load the plugin at `path` and call its entry point with standalone_host(thread_budget);
  /// throws CallError naming the file when it cannot.
  static LoadedPlugin load(const std::string& path, int thread_budget) {
    LoadedPlugin p;
    p.entry_ = open_entry(path);
    std::string message;
    const nibble_status s =
        call_entry(p.entry_, standalone_host(thread_budget), &p.desc_, sizeof p.desc_, &message);
    if (s != NIBBLE_OK) throw CallError(s, NIBBLE_PLUGIN_ENTRY_SYMBOL, path + ": " + message);
    return p;
  }

  /// The descriptor the plugin filled.
  const nibble_plugin& descriptor() const { return desc_; }
  /// The entry point (to call again, as the conformance kit does).
  nibble_plugin_entry_fn entry() const { return entry_; }
  /// Every kernel the plugin lists (empty when the table is missing).
  std::vector<const nibble_kernel*> kernels() const { return kernels_of(desc_); }
  /// The kernel called `name`, or nullptr.
  const nibble_kernel* kernel(const std::string& name) const {
    for (const nibble_kernel* k : kernels())
      if (k && k->name && name == k->name) return k;
    return nullptr;
  }
  /// The probe's answer; throws CallError when the probe fails.
  nibble_probe_result probe() const {
    nibble_probe_result r{};
    r.struct_size = sizeof r;
    const nibble_status s = guard("probe", [&] { return desc_.probe(&r); });
    if (s != NIBBLE_OK) throw CallError(s, "probe", "");
    r.detail[sizeof r.detail - 1] = '\0';
    return r;
  }

 private:
  nibble_plugin_entry_fn entry_ = nullptr;
  nibble_plugin desc_{};
};

}  // namespace NIBBLE_SDK_HOST_ABI_NAMESPACE
}  // namespace nibble::sdk::host
