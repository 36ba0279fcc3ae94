#include <nibble/error.hpp>
#include <nibble/options.hpp>

#include <sys/auxv.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <fstream>

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

NumericMode parse_mode(const std::string& text, const std::string& source) {
  if (text == "w4a16" || text == "a16" || text == "w8a16" || text == "weight_only")
    return NumericMode::W4A16;
  if (text == "w4a8" || text == "a8" || text == "w8a8" || text == "dynamic_int8")
    return NumericMode::W4A8;
  throw Error(source + ": numeric mode '" + text + "' is not one of w4a16, w4a8");
}

const char* mode_name(NumericMode mode) { return mode == NumericMode::W4A8 ? "w4a8" : "w4a16"; }

static int parse_threads(const std::string& text, const std::string& source) {
  try {
    size_t used = 0;
    int n = std::stoi(text, &used);
    if (used == text.size() && n >= 0 && n <= 4096) return n;
  } catch (const std::exception&) {
  }
  throw Error(source + ": threads '" + text + "' is not a whole number in [0, 4096]");
}

void apply_config_file(RuntimeOptions& options, const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error("config file " + path + ": cannot be opened");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw Error("config file " + path + ": not valid JSON: " + e.what());
  }
  if (!j.is_object()) throw Error("config file " + path + ": expected a JSON object");
  for (auto& [key, value] : j.items()) {
    std::string where = "config file " + path + ", key \"" + key + "\"";
    if (key == "backend") {
      if (value.is_string()) {
        options.backend = value.get<std::string>();
      } else if (value.is_array()) {
        std::string joined;
        for (auto& v : value) {
          if (!v.is_string()) throw Error(where + ": expected strings");
          joined += (joined.empty() ? "" : ",") + v.get<std::string>();
        }
        options.backend = joined;
      } else {
        throw Error(where + ": expected a string or a list of strings");
      }
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
                  ": unknown key (known: backend, plugin_dirs, threads, mode, plugins, "
                  "use_default_plugin_dir)");
    }
  }
}

void apply_environment(RuntimeOptions& options) {
  if (const char* c = std::getenv("NIBBLE_CONFIG"); c && *c) apply_config_file(options, c);
  if (const char* b = std::getenv("NIBBLE_BACKEND"); b && *b) options.backend = b;
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
