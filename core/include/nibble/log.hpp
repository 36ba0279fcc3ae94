// Logging for the core and, through the host table, for plugins. Lines go to stderr when their
// level reaches the threshold (NIBBLE_LOG_LEVEL=debug|info|warning|error, default warning).
#pragma once

#include <nibble/export.hpp>

#include <functional>
#include <string>

namespace nibble {

enum class LogLevel { Debug = 0, Info = 1, Warning = 2, Error = 3 };

/// Log `message` from `who` ("core", a plugin name) at `level`. Thread-safe.
NIBBLE_API void log(LogLevel level, const std::string& who, const std::string& message);

/// Lines below this level are dropped.
NIBBLE_API void set_log_level(LogLevel level);

/// The current threshold.
NIBBLE_API LogLevel log_level();

/// Replace the sink (nullptr restores stderr); for tests and tools that collect warnings.
NIBBLE_API void set_log_sink(
    std::function<void(LogLevel, const std::string&, const std::string&)> sink);

}  // namespace nibble
