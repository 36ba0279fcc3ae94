// The host's services (log, thread budget) as plugin code sees them. A host may load a plugin
// several times, one load per host context (a nibble Runtime), each with its own host table; the
// C glue (glue.hpp) makes the right load's table current on the calling thread for the length of
// every call into the plugin, so code anywhere inside a call reaches the services of the load
// that was called, without a process-wide table.
#pragma once

#include <nibble/sdk/plugin.h>
#include <nibble/sdk/plugin/error.hpp>

#include <algorithm>
#include <string>
#include <thread>

namespace nibble::sdk {

/// The host services of the load whose call the calling thread is running. Outside such a call
/// (a thread the plugin started, or before the entry point) there is no host: log drops the line
/// and thread_budget answers the hardware's concurrency.
class Host {
  struct Services {
    const nibble_host* host = nullptr;
    const char* plugin = "";
  };
  static Services& current() {
    thread_local Services s;  // trivially destructible: safe in exit handlers
    return s;
  }

 public:
  /// The current call's host table, or nullptr outside a call.
  static const nibble_host* get() { return current().host; }
  /// The host's ABI minor (0 when unknown).
  static int abi_minor() { return current().host ? current().host->abi_minor : 0; }
  /// Log a line through the host (dropped when there is no host or it gave no logger).
  static void log(int32_t level, const std::string& message) {
    const Services& s = current();
    const nibble_host* h = s.host;
    if (h && has_field(h->struct_size, offsetof(nibble_host, log), sizeof(void*)) && h->log)
      h->log(h->ctx, level, s.plugin, message.c_str());
  }
  /// Threads the host lets this load use: the host's budget when its ABI has one, else the
  /// hardware's concurrency.
  static int thread_budget() {
    int fallback = int(std::max(1u, std::thread::hardware_concurrency()));
#if NIBBLE_ABI_MINOR >= 1
    const nibble_host* h = current().host;
    if (h && h->abi_minor >= 1 &&
        has_field(h->struct_size, offsetof(nibble_host, thread_budget), sizeof(void*)) &&
        h->thread_budget) {
      int n = h->thread_budget(h->ctx);
      return n >= 1 ? n : 1;
    }
#endif
    return fallback;
  }

  /// Makes `host` (with the plugin's name for log lines) the calling thread's host until the
  /// scope ends, then restores the previous one. The C glue opens one around every call.
  class Scope {
   public:
    /// Enter `host`'s services on this thread.
    Scope(const nibble_host* host, const char* plugin) : previous_(current()) {
      current() = Services{host, plugin ? plugin : ""};
    }
    ~Scope() { current() = previous_; }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Services previous_;
  };
};

}  // namespace nibble::sdk
