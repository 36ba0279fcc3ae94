#include "cli_options.hpp"

#include <nibble/error.hpp>
#include <nibble/parse_number.hpp>

#include <algorithm>
#include <cstdlib>

namespace nibble::cli {

namespace {
// The cap NIBBLE_THREADS and the config file's "threads" apply too: oneTBB fails far above it.
constexpr int64_t kMaxThreads = 4096;
}  // namespace

std::vector<std::string> to_args(int argc, char** argv) {
  return std::vector<std::string>(argv + std::min(argc, 1), argv + argc);
}

bool wants_help(const std::vector<std::string>& args) {
  return std::any_of(args.begin(), args.end(),
                     [](const std::string& a) { return a == "-h" || a == "--help"; });
}

CommonFlags take_common_flags(std::vector<std::string>& args) {
  CommonFlags f;
  std::vector<std::string> rest;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&](const char* flag) -> std::string {
      std::string prefix = std::string(flag) + "=";
      std::string v;
      if (a.rfind(prefix, 0) == 0)
        v = a.substr(prefix.size());
      else if (i + 1 < args.size())
        v = args[++i];
      // An empty value would read as "not given" and silently fall back to the default.
      if (v.empty()) throw Error(std::string(flag) + " needs a value");
      return v;
    };
    auto is = [&](const char* flag) {
      return a == flag || a.rfind(std::string(flag) + "=", 0) == 0;
    };
    if (is("--plugin-dir"))
      f.plugin_dirs.push_back(value("--plugin-dir"));
    else if (is("--backend"))
      f.backend = value("--backend");
    else if (is("--device"))
      f.device = value("--device");
    else if (is("--threads"))
      f.threads = value("--threads");
    else if (is("--mode"))
      f.mode = value("--mode");
    else if (is("--config"))
      f.config = value("--config");
    else if (a == "--no-default-plugin-dir")
      f.no_default_plugin_dir = true;
    else if (a == "--allow-unsafe-plugin-dirs")
      f.allow_unsafe_plugin_dirs = true;
    else
      rest.push_back(a);
  }
  args = rest;
  return f;
}

RuntimeOptions resolve_options(const CommonFlags& f) {
  RuntimeOptions o;
  if (!f.config.empty()) apply_config_file(o, f.config);
  apply_environment(o);
  // Flag directories come before the environment's (both before the default directory).
  o.plugin_dirs.insert(o.plugin_dirs.begin(), f.plugin_dirs.begin(), f.plugin_dirs.end());
  if (!f.backend.empty()) o.backend = f.backend;
  if (!f.device.empty()) {
    parse_device(f.device, "--device");
    o.device = f.device;
  }
  if (!f.threads.empty()) o.threads = int(parse_integer(f.threads, 0, kMaxThreads, "--threads"));
  if (!f.mode.empty()) o.mode = parse_mode(f.mode, "--mode");
  if (f.no_default_plugin_dir) o.use_default_plugin_dir = false;
  if (f.allow_unsafe_plugin_dirs) o.allow_unsafe_plugin_dirs = true;
  return o;
}

const char* common_flags_help() {
  return "Runtime flags (every command):\n"
         "  --plugin-dir DIR       load plugins from DIR (repeatable; also NIBBLE_PLUGIN_PATH)\n"
         "  --backend NAME         auto | a backend name | a fallback list a,b,* (NIBBLE_BACKEND)\n"
         "  --device DEV           cpu | cuda | cuda:1 | ...: where layers run; default: the\n"
         "                         device of a lone device backend, else cpu (NIBBLE_DEVICE)\n"
         "  --threads N            threads per layer, 0..4096, 0 = all (NIBBLE_THREADS)\n"
         "  --mode w4a16|w4a8      numeric mode of quantized layers (NIBBLE_MODE)\n"
         "  --config FILE          JSON runtime config (NIBBLE_CONFIG)\n"
         "  --no-default-plugin-dir  do not search the install's own plugin directory\n"
         "  --allow-unsafe-plugin-dirs  load from world-writable or foreign-owned places\n";
}

}  // namespace nibble::cli
