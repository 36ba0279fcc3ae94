#include <nibble/log.hpp>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace nibble {
namespace {

LogLevel initial_level() {
  const char* env = std::getenv("NIBBLE_LOG_LEVEL");
  if (!env) return LogLevel::Warning;
  if (!std::strcmp(env, "debug")) return LogLevel::Debug;
  if (!std::strcmp(env, "info")) return LogLevel::Info;
  if (!std::strcmp(env, "error")) return LogLevel::Error;
  return LogLevel::Warning;
}

std::atomic<int>& threshold() {
  static std::atomic<int> level{int(initial_level())};
  return level;
}

struct Sink {
  std::mutex mutex;
  std::function<void(LogLevel, const std::string&, const std::string&)> fn;
};
Sink& sink() {
  static Sink s;
  return s;
}

const char* level_name(LogLevel l) {
  switch (l) {
    case LogLevel::Debug:
      return "debug";
    case LogLevel::Info:
      return "info";
    case LogLevel::Warning:
      return "warning";
    case LogLevel::Error:
      return "error";
  }
  return "?";
}

}  // namespace

void log(LogLevel level, const std::string& who, const std::string& message) {
  if (int(level) < threshold().load()) return;
  Sink& s = sink();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.fn) {
    s.fn(level, who, message);
    return;
  }
  std::fprintf(stderr, "nibble %s [%s]: %s\n", level_name(level), who.c_str(), message.c_str());
}

void set_log_level(LogLevel level) { threshold() = int(level); }

LogLevel log_level() { return LogLevel(threshold().load()); }

void set_log_sink(std::function<void(LogLevel, const std::string&, const std::string&)> fn) {
  std::lock_guard<std::mutex> lock(sink().mutex);
  sink().fn = std::move(fn);
}

}  // namespace nibble
