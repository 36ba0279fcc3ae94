#include "host_table.hpp"

#include <nibble/log.hpp>

#include <algorithm>
#include <atomic>
#include <thread>

namespace nibble::detail {

namespace {

std::atomic<int> g_threads{0};

void host_log(void*, int32_t level, const char* plugin, const char* message) {
  LogLevel l = level <= NIBBLE_LOG_DEBUG     ? LogLevel::Debug
               : level == NIBBLE_LOG_INFO    ? LogLevel::Info
               : level == NIBBLE_LOG_WARNING ? LogLevel::Warning
                                             : LogLevel::Error;
  log(l, plugin ? plugin : "plugin", message ? message : "");
}

[[maybe_unused]] int32_t host_thread_budget(void*) { return thread_budget(); }

}  // namespace

const nibble_host* host_table() {
  static const nibble_host host = [] {
    nibble_host h{};
    h.struct_size = sizeof h;
    h.abi_major = NIBBLE_ABI_MAJOR;
    h.abi_minor = NIBBLE_ABI_MINOR;
    h.host_version = NIBBLE_VERSION;
    h.ctx = nullptr;
    h.log = &host_log;
#if NIBBLE_ABI_MINOR >= 1
    h.thread_budget = &host_thread_budget;
#endif
    return h;
  }();
  return &host;
}

void set_thread_budget(int threads) { g_threads = std::max(0, threads); }

int thread_budget() {
  int t = g_threads.load();
  return t > 0 ? t : int(std::max(1u, std::thread::hardware_concurrency()));
}

}  // namespace nibble::detail
