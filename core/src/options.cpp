#include <nibble/error.hpp>
#include <nibble/options.hpp>
#include <nibble/parse_number.hpp>
#include <nibble/sdk/device.hpp>
#include <nibble/untrusted_text.hpp>

#include <sys/auxv.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>

#include "io/regular_file.hpp"
#include "json/untrusted_json.hpp"

namespace nibble {

std::vector<std::string> split_list(const std::string& text, char separator) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(separator, start);
    if (end == std::string::npos) end = text.size();
    std::string item = text.substr(start, end - start);
    size_t a = item.find_first_not_of(" \t");
    size_t b = item.find_last_not_of(" \t");
    if (a != std::string::npos) out.push_back(item.substr(a, b - a + 1));
    start = end + 1;
  }
  return out;
}

std::vector<std::string> parse_backend_list(const std::string& text, const std::string& source) {
  if (text.empty()) return {"auto"};
  std::vector<std::string> names;
  size_t start = 0;
  while (true) {
    const size_t end = std::min(text.find(',', start), text.size());
    std::string item = text.substr(start, end - start);
    const size_t a = item.find_first_not_of(" \t");
    if (a == std::string::npos) {
      throw Error(source + ": backend list " + quoted_untrusted(text) +
                  " has an empty item; expected auto, a backend name, or names separated by "
                  "commas (* for every other available backend)");
    }
    names.push_back(item.substr(a, item.find_last_not_of(" \t") - a + 1));
    if (end == text.size()) break;
    start = end + 1;
  }
  return names;
}

NumericMode parse_mode(const std::string& text, const std::string& source) {
  if (text == "w4a16") return NumericMode::W4A16;
  if (text == "w4a8") return NumericMode::W4A8;
  throw Error(source + ": numeric mode " + quoted_untrusted(text) + " is not one of w4a16, w4a8");
}

DLDevice parse_device(const std::string& text, const std::string& source) {
  // Device indices are small (a machine's GPUs); the cap keeps a typo from reading as an index.
  constexpr int64_t kMaxDeviceIndex = 1023;
  const size_t colon = text.find(':');
  const std::string type_name = text.substr(0, colon);
  const int32_t type = sdk::device_type_from_name(type_name);
  if (type == 0)
    throw Error(source + ": device " + quoted_untrusted(text) +
                " is not cpu or a device type (cuda, rocm, opencl, vulkan, metal, vpi, ext_dev), "
                "optionally followed by :index");
  int32_t index = 0;
  if (colon != std::string::npos)
    index = int32_t(parse_integer(text.substr(colon + 1), 0, kMaxDeviceIndex,
                                  source + ": the index of device " + quoted_untrusted(text)));
  const DLDevice device{DLDeviceType(type), index};
  if (sdk::is_cpu_memory(device)) {
    if (index != 0)
      throw Error(source + ": device " + quoted_untrusted(text) +
                  " is host memory, which has no index; expected cpu");
    return DLDevice{kDLCPU, 0};
  }
  if (type == kDLCUDAManaged)
    throw Error(source + ": device " + quoted_untrusted(text) +
                " is managed memory, which no kernel runs on; expected cpu or a device");
  return device;
}

const char* mode_name(NumericMode mode) { return mode == NumericMode::W4A8 ? "w4a8" : "w4a16"; }

static int parse_threads(const std::string& text, const std::string& source) {
  return int(parse_integer(text, 0, 4096, source + ": threads"));
}

void apply_config_file(RuntimeOptions& options, const std::string& path) {
  // A runtime config is a few lines; the limit only keeps a wrong path from being read whole.
  constexpr uint64_t kMaxRuntimeConfigBytes = 1u << 20;
  const std::string label = "config file " + escape_untrusted(path, 400);
  const std::string text = detail::read_regular_file(path, kMaxRuntimeConfigBytes, "config file");
  nlohmann::json j = detail::parse_json(text, label, 65536);
  if (!j.is_object()) throw Error(label + ": expected a JSON object");
  for (auto& [key, value] : j.items()) {
    std::string where = label + ", key \"" + escape_untrusted(key, 100) + "\"";
    if (key == "backend") {
      if (value.is_string()) {
        options.backend = value.get<std::string>();
        parse_backend_list(options.backend, where);
      } else if (value.is_array()) {
        std::string joined;
        for (auto& v : value) {
          if (!v.is_string()) throw Error(where + ": expected strings");
          if (v.get_ref<const std::string&>().find(',') != std::string::npos)
            throw Error(where + ": a list item cannot hold a comma");
          joined += (joined.empty() ? "" : ",") + v.get<std::string>();
        }
        if (value.empty()) throw Error(where + ": expected at least one backend name");
        parse_backend_list(joined, where);
        options.backend = joined;
      } else {
        throw Error(where + ": expected a string or a list of strings");
      }
    } else if (key == "device") {
      if (!value.is_string()) throw Error(where + ": expected a device such as \"cuda:0\"");
      options.device = value.get<std::string>();
      parse_device(options.device, where);
    } else if (key == "plugin_dirs") {
      if (!value.is_array()) throw Error(where + ": expected a list of directories");
      for (auto& v : value) {
        if (!v.is_string()) throw Error(where + ": expected strings");
        options.plugin_dirs.push_back(v.get<std::string>());
      }
    } else if (key == "threads") {
      if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() > 4096)
        throw Error(where + ": expected a whole number in [0, 4096]");
      options.threads = value.get<int>();
    } else if (key == "mode") {
      if (!value.is_string()) throw Error(where + ": expected \"w4a16\" or \"w4a8\"");
      options.mode = parse_mode(value.get<std::string>(), where);
    } else if (key == "plugins") {
      if (!value.is_array()) throw Error(where + ": expected a list of plugin names");
      options.allowed_plugins.clear();
      for (auto& v : value) {
        if (!v.is_string()) throw Error(where + ": expected strings");
        options.allowed_plugins.push_back(v.get<std::string>());
      }
    } else if (key == "use_default_plugin_dir") {
      if (!value.is_boolean()) throw Error(where + ": expected true or false");
      options.use_default_plugin_dir = value.get<bool>();
    } else {
      throw Error(where +
                  ": unknown key (known: backend, device, plugin_dirs, threads, mode, plugins, "
                  "use_default_plugin_dir)");
    }
  }
}

void apply_environment(RuntimeOptions& options) {
  if (const char* c = std::getenv("NIBBLE_CONFIG"); c && *c) apply_config_file(options, c);
  if (const char* b = std::getenv("NIBBLE_BACKEND"); b && *b) {
    parse_backend_list(b, "NIBBLE_BACKEND");
    options.backend = b;
  }
  if (const char* d = std::getenv("NIBBLE_DEVICE"); d && *d) {
    parse_device(d, "NIBBLE_DEVICE");
    options.device = d;
  }
  // A setuid/setgid process must not take code locations from its caller's environment.
  if (const char* p = secure_getenv("NIBBLE_PLUGIN_PATH"); p && *p && !getauxval(AT_SECURE)) {
    for (auto& dir : split_list(p, ':')) options.plugin_dirs.push_back(dir);
  }
  if (const char* t = std::getenv("NIBBLE_THREADS"); t && *t)
    options.threads = parse_threads(t, "NIBBLE_THREADS");
  if (const char* m = std::getenv("NIBBLE_MODE"); m && *m)
    options.mode = parse_mode(m, "NIBBLE_MODE");
  if (const char* a = std::getenv("NIBBLE_PLUGINS"); a && *a)
    options.allowed_plugins = split_list(a, ',');
  if (const char* u = secure_getenv("NIBBLE_ALLOW_UNSAFE_PLUGIN_DIRS");
      u && *u && !getauxval(AT_SECURE))
    options.allow_unsafe_plugin_dirs = std::string(u) != "0";
}

}  // namespace nibble
