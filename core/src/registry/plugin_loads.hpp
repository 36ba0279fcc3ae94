// Plugin libraries in the process and their loads. A library is opened once and never unloaded
// (threads of oneTBB and friends make dlclose unsafe). Its entry point runs once per registry for
// a plugin of ABI 1.2 or later (a load per registry, each with that registry's host table) and
// once per process for an older plugin (one load, shared). A load per registry is shared by its
// registry and the layers made from it, and ends (shutdown2) when the last of them goes; an older
// plugin's one load lives for the process. Every load ends once: then, at process exit, or at
// shutdown_plugins(), whichever comes first.
#pragma once

#include <nibble/sdk/plugin.h>
#include <nibble/registry.hpp>

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "host_table.hpp"

namespace nibble::detail {

struct LoadedLibrary;

/// What one entry call returned, and the host table it was given (kept alive as long as the load).
struct PluginLoad {
  nibble_plugin plugin{};
  nibble_status entry_status = NIBBLE_OK;
  std::string entry_message;
  std::shared_ptr<const HostTable> host;
  bool shut_down = false;
  LoadedLibrary* library = nullptr;  // the library it is a load of

  /// Whether the plugin filled plugin_context, probe2 and shutdown2 (ABI 1.2): a load per registry.
  bool per_registry() const;
  /// The probe of this load (probe2 with its context, or a pre-1.2 plugin's probe).
  nibble_status probe(nibble_probe_result* result) const;
};

/// Held while opening, entering or shutting down plugins.
std::mutex& loads_mutex();

/// The library at `path`, opened now or earlier in the process; nullptr, with r's stage and
/// message saying why, when it cannot be opened or lacks the entry symbol.
LoadedLibrary* open_library(const std::string& path, LoadReport& r);

/// This registry's load of `lib`: the load already in `entered` (the same library reached twice),
/// a pre-1.2 plugin's one load, or a new entry call with `host`. The caller holds loads_mutex()
/// and must keep every load it gets until it has released that lock: the last reference to a
/// load per registry ends it, which takes the lock.
std::shared_ptr<PluginLoad> enter_plugin(
    LoadedLibrary& lib, const std::shared_ptr<const HostTable>& host,
    std::map<LoadedLibrary*, std::shared_ptr<PluginLoad>>& entered);

/// End every load not yet ended (the caller holds loads_mutex()).
void shutdown_loads_locked();

}  // namespace nibble::detail
