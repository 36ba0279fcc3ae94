#include "plugin_loads.hpp"

#include <boost/dll/shared_library.hpp>

#include <nibble/log.hpp>
#include <nibble/untrusted_text.hpp>

#include <cstdlib>
#include <filesystem>
#include <set>
#include <vector>

namespace nibble::detail {

using Entry = nibble_status(const nibble_host*, nibble_plugin*, nibble_error*);

struct LoadedLibrary {
  std::string path;
  boost::dll::shared_library library;
  Entry* entry = nullptr;
  std::shared_ptr<PluginLoad> only;    // a pre-1.2 plugin's load, or an entry call that failed
  std::set<PluginLoad*> per_registry;  // the live loads per registry (each frees itself)
  bool entered_once = false;
};

namespace {

struct Process {
  std::mutex mutex;
  std::map<std::string, LoadedLibrary*> libraries;  // by canonical path; never freed
};

Process& process() {
  static Process* p = new Process;  // leaked on purpose: used from the atexit handler
  return *p;
}

void shutdown_at_exit() {
  std::lock_guard<std::mutex> lock(loads_mutex());
  shutdown_loads_locked();
}

void end_load(const std::string& path, PluginLoad& load);

// The deleter of a load per registry: its last holder is gone, so end it and forget it.
void release_load(PluginLoad* load) {
  std::lock_guard<std::mutex> lock(loads_mutex());
  load->library->per_registry.erase(load);
  end_load(load->library->path, *load);
  delete load;
}

void end_load(const std::string& path, PluginLoad& load) {
  if (load.shut_down || load.entry_status != NIBBLE_OK) return;
  load.shut_down = true;
  try {
    if (load.per_registry())
      load.plugin.shutdown2(load.plugin.plugin_context);
    else if (load.plugin.shutdown)
      load.plugin.shutdown();
  } catch (...) {
    log(LogLevel::Error, "core", path + ": shutdown threw an exception");
  }
}

std::unique_ptr<PluginLoad> call_entry(LoadedLibrary& lib,
                                       const std::shared_ptr<const HostTable>& host) {
  Entry* entry = lib.entry;
  auto load = std::make_unique<PluginLoad>();
  load->library = &lib;
  load->host = host;
  load->plugin.struct_size = sizeof(nibble_plugin);
  load->plugin.abi_major = NIBBLE_ABI_MAJOR;
  load->plugin.abi_minor = NIBBLE_ABI_MINOR;
  nibble_error err{};
  err.struct_size = sizeof err;
  try {
    load->entry_status = entry(host->table(), &load->plugin, &err);
    err.message[sizeof err.message - 1] = '\0';
    load->entry_message = escape_untrusted(err.message, 1024);
  } catch (...) {
    load->entry_status = NIBBLE_INTERNAL;
    load->entry_message = "the entry point threw a C++ exception across the C ABI";
  }
  return load;
}

}  // namespace

bool PluginLoad::per_registry() const {
  return plugin.struct_size >= offsetof(nibble_plugin, shutdown2) + sizeof(void*) &&
         plugin.probe2 && plugin.shutdown2;
}

nibble_status PluginLoad::probe(nibble_probe_result* result) const {
  return per_registry() ? plugin.probe2(plugin.plugin_context, result) : plugin.probe(result);
}

std::mutex& loads_mutex() { return process().mutex; }

LoadedLibrary* open_library(const std::string& path, LoadReport& report) {
  Process& p = process();
  auto it = p.libraries.find(path);
  if (it != p.libraries.end()) return it->second;
  auto lib = std::make_unique<LoadedLibrary>();
  lib->path = path;
  report.stage = LoadReport::Stage::Load;
  try {
    lib->library.load(std::filesystem::path(path),
                      boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local);
  } catch (const std::exception& e) {
    report.message = std::string("cannot be loaded: ") + e.what();
    return nullptr;
  }
  report.stage = LoadReport::Stage::Entry;
  try {
    lib->entry = &lib->library.get<Entry>(NIBBLE_PLUGIN_ENTRY_SYMBOL);
  } catch (const std::exception& e) {
    // The section headers named the symbol but the dynamic loader does not resolve it.
    report.message =
        std::string("the loaded library has no " NIBBLE_PLUGIN_ENTRY_SYMBOL ": ") + e.what();
    return nullptr;
  }
  LoadedLibrary* raw = lib.release();
  p.libraries[path] = raw;
  return raw;
}

std::shared_ptr<PluginLoad> enter_plugin(
    LoadedLibrary& lib, const std::shared_ptr<const HostTable>& host,
    std::map<LoadedLibrary*, std::shared_ptr<PluginLoad>>& entered) {
  if (auto it = entered.find(&lib); it != entered.end()) return it->second;
  if (lib.only) return entered[&lib] = lib.only;
  std::unique_ptr<PluginLoad> load = call_entry(lib, host);
  // Registered after a library's first entry, so it runs before the destructors of the statics
  // the plugin made then (exit handlers run in reverse order); once per library, so a process
  // that makes many Runtimes does not grow the exit list. shut_down flags make repeats no-ops.
  if (!lib.entered_once) std::atexit(&shutdown_at_exit);
  lib.entered_once = true;
  if (load->entry_status == NIBBLE_OK && load->per_registry()) {
    lib.per_registry.insert(load.get());
    return entered[&lib] = std::shared_ptr<PluginLoad>(load.release(), &release_load);
  }
  lib.only = std::move(load);
  return entered[&lib] = lib.only;
}

void shutdown_loads_locked() {
  for (auto& [path, lib] : process().libraries) {
    if (lib->only) end_load(path, *lib->only);
    for (PluginLoad* load : lib->per_registry) end_load(path, *load);
  }
}

}  // namespace nibble::detail
