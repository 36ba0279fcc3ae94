// Flags every nibble command accepts (--plugin-dir, --backend, --device, --threads, --mode,
// --config) and the runtime options they resolve to: flag over environment over config file over
// defaults.
#pragma once

#include <nibble/options.hpp>

#include <string>
#include <vector>

namespace nibble::cli {

/// Runtime-related flags pulled out of a command line.
struct CommonFlags {
  std::vector<std::string> plugin_dirs;
  std::string backend, device, threads, mode, config;
  bool no_default_plugin_dir = false;
  bool allow_unsafe_plugin_dirs = false;
};

/// Remove the common flags from args (throws nibble::Error on a flag missing its value).
CommonFlags take_common_flags(std::vector<std::string>& args);

/// Defaults, then the config file (--config or NIBBLE_CONFIG), then the environment, then flags.
RuntimeOptions resolve_options(const CommonFlags& flags);

/// Help text for the common flags.
const char* common_flags_help();

/// argv[1..argc) as strings.
std::vector<std::string> to_args(int argc, char** argv);

/// Whether args contain -h or --help.
bool wants_help(const std::vector<std::string>& args);

}  // namespace nibble::cli
