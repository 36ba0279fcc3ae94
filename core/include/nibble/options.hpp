// Runtime options: where plugins are looked for, which backend runs the layers, on which device,
// how many threads, which numeric mode. Sources, lowest precedence first: defaults, the C++ struct
// (or a config file), environment variables, command-line flags.
#pragma once

#include <nibble/export.hpp>

#include <dlpack/dlpack.h>

#include <string>
#include <vector>

namespace nibble {

/// The numeric mode of quantized layers (plugin.h's nibble_numeric_mode, by name).
enum class NumericMode { W4A16, W4A8 };

/// Options of a Runtime.
struct RuntimeOptions {
  /// Directories to load plugins from, in order, before the install's own plugin directory.
  std::vector<std::string> plugin_dirs;
  /// Also search the install's (or build tree's) own plugin directory, next to libnibble.
  bool use_default_plugin_dir = true;
  /// "auto", one backend name (strict), or a comma-separated fallback list ("cpu_amx,npu_ref";
  /// "*" stands for every other available backend, by priority).
  std::string backend = "auto";
  /// Where layers run, and so where their tensors must be: "cpu" (host memory), a device type
  /// ("cuda", "rocm", ... : index 0) or a type and index ("cuda:1"). Empty: implied by the
  /// backend — a single named backend whose kernels run on a device (and that finds one) puts
  /// layers on its device 0, anything else on the CPU. NIBBLE_DEVICE or --device sets it.
  std::string device;
  /// Threads a layer may use; 0 means all hardware threads.
  int threads = 0;
  /// Numeric mode of quantized layers.
  NumericMode mode = NumericMode::W4A16;
  /// Allow-list of plugin names to load (empty: all). NIBBLE_PLUGINS sets it.
  std::vector<std::string> allowed_plugins;
  /// Load plugins from directories or files that are world-writable or owned by someone other
  /// than this user or root (refused by default: anyone could plant code there).
  /// NIBBLE_ALLOW_UNSAFE_PLUGIN_DIRS=1 or --allow-unsafe-plugin-dirs sets it.
  bool allow_unsafe_plugin_dirs = false;
};

/// Apply a JSON config file ({"backend", "device", "plugin_dirs", "threads", "mode", "plugins"}) on
/// top of `options`; throws nibble::Error naming the file and key on a bad value.
NIBBLE_API void apply_config_file(RuntimeOptions& options, const std::string& path);

/// Apply NIBBLE_BACKEND, NIBBLE_DEVICE, NIBBLE_PLUGIN_PATH (':'-separated, ignored when the process
/// is setuid or setgid), NIBBLE_THREADS, NIBBLE_MODE, NIBBLE_PLUGINS,
/// NIBBLE_ALLOW_UNSAFE_PLUGIN_DIRS and NIBBLE_CONFIG (a config file applied before the other
/// variables).
NIBBLE_API void apply_environment(RuntimeOptions& options);

/// Parse "w4a16" / "w4a8"; throws nibble::Error listing the valid names.
NIBBLE_API NumericMode parse_mode(const std::string& text, const std::string& source);

/// Parse a device ("cpu", "cuda", "cuda:1", "rocm:0", ...: a DLPack device type as nibble names
/// it, optionally ":index"); throws nibble::Error naming `source`, the text and what was expected.
/// Host memory of any kind ("cpu", "cuda_host", "rocm_host") parses as {kDLCPU, 0}.
NIBBLE_API DLDevice parse_device(const std::string& text, const std::string& source);

/// The mode's name ("w4a16", "w4a8"), as mode_name(int) names its ABI value.
NIBBLE_API const char* mode_name(NumericMode mode);

/// The backend names of a --backend value ("auto" for an empty one), trimmed; throws
/// nibble::Error naming `source` when an item is empty ("," or "a,,b").
NIBBLE_API std::vector<std::string> parse_backend_list(const std::string& text,
                                                       const std::string& source);

/// Split "a,b,,c" into {"a","b","c"} (trimmed, empties dropped).
NIBBLE_API std::vector<std::string> split_list(const std::string& text, char separator);

}  // namespace nibble
