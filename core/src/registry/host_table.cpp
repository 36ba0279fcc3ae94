#include "host_table.hpp"

#include <nibble/log.hpp>

#include <algorithm>
#include <thread>

namespace nibble::detail {

namespace {

void host_log(void*, int32_t level, const char* plugin, const char* message) {
  LogLevel l = level <= NIBBLE_LOG_DEBUG     ? LogLevel::Debug
               : level == NIBBLE_LOG_INFO    ? LogLevel::Info
               : level == NIBBLE_LOG_WARNING ? LogLevel::Warning
                                             : LogLevel::Error;
  log(l, plugin ? plugin : "plugin", message ? message : "");
}

int32_t host_thread_budget(void* ctx) {
  return ctx ? static_cast<const HostTable*>(ctx)->thread_budget() : 1;
}

}  // namespace

HostTable::HostTable(int threads)
    : threads_(threads > 0 ? threads : int(std::max(1u, std::thread::hardware_concurrency()))) {
  table_.struct_size = sizeof table_;
  table_.abi_major = NIBBLE_ABI_MAJOR;
  table_.abi_minor = NIBBLE_ABI_MINOR;
  table_.host_version = NIBBLE_VERSION;
  table_.ctx = this;
  table_.log = &host_log;
  table_.thread_budget = &host_thread_budget;
}

}  // namespace nibble::detail
