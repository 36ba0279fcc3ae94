// A plugin loaded by a host that is not libnibble (the conformance kit, the bench, plugin tests):
// dlopen, the entry point called with a host table of this translation unit's ABI minor, and the
// questions a host asks of the descriptor (kernels, probe, can_implement, device memory), with
// the load's own probe2/shutdown2 when the plugin gives them (ABI 1.2). libnibble's own loader
// adds a preflight and a registry on top and does not use this. Header-only; link -ldl.
#pragma once

#include <nibble/sdk/plugin.h>
#include <nibble/sdk/host/abi_namespace.hpp>
#include <nibble/sdk/host/device.hpp>
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

/// Whether `p` gives its load's probe2 and shutdown2 (ABI 1.2; a host calls them instead of probe
/// and shutdown, with the load's plugin_context).
inline bool has_load_calls(const nibble_plugin& p) {
#if NIBBLE_ABI_MINOR >= 2
  return p.struct_size >= offsetof(nibble_plugin, shutdown2) + sizeof(void*) && p.probe2 &&
         p.shutdown2;
#else
  (void)p;
  return false;
#endif
}

/// Why `p`'s load calls are unusable: probe2 and shutdown2 come as a pair ("" when they do).
inline std::string load_calls_problem(const nibble_plugin& p) {
#if NIBBLE_ABI_MINOR >= 2
  if (p.struct_size >= offsetof(nibble_plugin, shutdown2) + sizeof(void*) &&
      (p.probe2 == nullptr) != (p.shutdown2 == nullptr))
    return "probe2 and shutdown2 come as a pair, but only one of them is set";
#else
  (void)p;
#endif
  return "";
}

/// Probe the load `p` describes: probe2 with its context when it has one, else probe.
inline nibble_status probe_load(const nibble_plugin& p, nibble_probe_result* result) {
#if NIBBLE_ABI_MINOR >= 2
  if (has_load_calls(p)) return p.probe2(p.plugin_context, result);
#endif
  return p.probe(result);
}

/// End the load `p` describes: shutdown2 with its context when it has one, else shutdown. The
/// host calls nothing of that load afterwards.
inline void shutdown_load(const nibble_plugin& p) {
#if NIBBLE_ABI_MINOR >= 2
  if (has_load_calls(p)) return p.shutdown2(p.plugin_context);
#endif
  p.shutdown();
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
    if (std::string why = load_calls_problem(p.desc_); !why.empty())
      throw CallError(NIBBLE_INVALID_ARGUMENT, NIBBLE_PLUGIN_ENTRY_SYMBOL, path + ": " + why);
#if NIBBLE_ABI_MINOR >= 3
    if (std::string why = device_memory_problem(p.desc_); !why.empty())
      throw CallError(NIBBLE_INVALID_ARGUMENT, NIBBLE_PLUGIN_ENTRY_SYMBOL, path + ": " + why);
#endif
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
  /// The probe's answer (probe2 for the load when the plugin has it); throws CallError when the
  /// probe fails.
  nibble_probe_result probe() const {
    nibble_probe_result r{};
    r.struct_size = sizeof r;
    const nibble_status s = guard("probe", [&] { return probe_load(desc_, &r); });
    if (s != NIBBLE_OK) throw CallError(s, "probe", "");
    r.detail[sizeof r.detail - 1] = '\0';
    return r;
  }
  /// End this load (shutdown2 for the load when the plugin has it, else shutdown); nothing of it
  /// may be called afterwards, this object's kernels included.
  void shutdown() const {
    guard("shutdown", [&] { shutdown_load(desc_); });
  }
#if NIBBLE_ABI_MINOR >= 3
  /// Device `device_id` of this load's device memory; empty for a CPU plugin or one before 1.3.
  Device device(int32_t device_id = 0) const { return device_of(desc_, device_id); }
#endif

 private:
  nibble_plugin_entry_fn entry_ = nullptr;
  nibble_plugin desc_{};
};

}  // namespace NIBBLE_SDK_HOST_ABI_NAMESPACE
}  // namespace nibble::sdk::host
