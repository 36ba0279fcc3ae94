// Finding and loading plugin files with Boost.DLL. Only named directories and the install's own
// plugin directory are searched; a file is checked for the entry symbol before any of its code
// runs (by nibble's own bounds-checked ELF reader: Boost's crashes on crafted files); a symlink is
// resolved first and the policy applies to the file it reaches; every file gets a LoadReport; one
// bad file never stops the others.
#include <boost/dll/runtime_symbol_info.hpp>
#include <boost/dll/shared_library.hpp>

#include <nibble/error.hpp>
#include <nibble/log.hpp>
#include <nibble/registry.hpp>
#include <nibble/untrusted_text.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <regex>
#include <set>

#include <sys/stat.h>
#include <unistd.h>

#include "../file_kind.hpp"
#include "elf_exports.hpp"
#include "host_table.hpp"

namespace fs = std::filesystem;

namespace nibble {

const char* stage_name(LoadReport::Stage stage) {
  switch (stage) {
    case LoadReport::Stage::Scan:
      return "scan";
    case LoadReport::Stage::Preflight:
      return "preflight";
    case LoadReport::Stage::Load:
      return "load";
    case LoadReport::Stage::Entry:
      return "entry";
    case LoadReport::Stage::Version:
      return "version";
    case LoadReport::Stage::Validate:
      return "validate";
    case LoadReport::Stage::Probe:
      return "probe";
    case LoadReport::Stage::Loaded:
      return "loaded";
  }
  return "?";
}

namespace {

// A plugin file loaded into the process. Libraries are never unloaded: threads of oneTBB and
// friends make dlclose unsafe, so the process keeps them and calls shutdown at exit instead.
struct LoadedLibrary {
  boost::dll::shared_library library;
  nibble_plugin plugin{};
  nibble_status entry_status = NIBBLE_OK;
  std::string entry_message;
  bool shut_down = false;
};

struct Process {
  std::mutex mutex;
  std::map<std::string, LoadedLibrary*> libraries;  // by canonical path; never freed
};

Process& process() {
  static Process* p = new Process;  // leaked on purpose: used from the atexit handler
  return *p;
}

// The 1.0 layouts: what a plugin of any minor must provide.
constexpr size_t kPluginMinSize = offsetof(nibble_plugin, shutdown) + sizeof(void*);
constexpr size_t kKernelMinSize = offsetof(nibble_kernel, release) + sizeof(void*);

const std::regex& plugin_file_pattern() {
  static const std::regex re("^libnibble_([a-z0-9_]+)\\.so$");
  return re;
}

bool exports_entry(const std::string& path, std::string* why) {
  ElfExports e = read_elf_exports(path, NIBBLE_PLUGIN_ENTRY_SYMBOL);
  if (!e.problem.empty()) {
    *why = "not a shared library for this platform: " + e.problem;
    return false;
  }
  if (!e.has_symbol) *why = "not a nibble plugin: it does not export " NIBBLE_PLUGIN_ENTRY_SYMBOL;
  return e.has_symbol;
}

}  // namespace

PluginExports plugin_exports(const std::string& path) {
  ElfExports e = read_elf_exports(path, NIBBLE_PLUGIN_ENTRY_SYMBOL);
  PluginExports out;
  out.problem = std::move(e.problem);
  out.names = std::move(e.dynamic_names);
  out.truncated = e.truncated;
  return out;
}

namespace {

void shutdown_all_locked(Process& p) {
  for (auto& [path, lib] : p.libraries) {
    if (lib->shut_down || lib->entry_status != NIBBLE_OK || !lib->plugin.shutdown) continue;
    lib->shut_down = true;
    try {
      lib->plugin.shutdown();
    } catch (...) {
      log(LogLevel::Error, "core", path + ": shutdown threw an exception");
    }
  }
}

void shutdown_at_exit() {
  Process& p = process();
  std::lock_guard<std::mutex> lock(p.mutex);
  shutdown_all_locked(p);
}

// Load (or find already loaded) the library at `path` and run its entry point once.
LoadedLibrary* load_library(const std::string& path, LoadReport& report) {
  Process& p = process();
  auto it = p.libraries.find(path);
  if (it != p.libraries.end()) return it->second;
  auto lib = std::make_unique<LoadedLibrary>();
  report.stage = LoadReport::Stage::Load;
  try {
    lib->library.load(fs::path(path),
                      boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local);
  } catch (const std::exception& e) {
    report.message = std::string("cannot be loaded: ") + e.what();
    return nullptr;
  }
  report.stage = LoadReport::Stage::Entry;
  using Entry = nibble_status(const nibble_host*, nibble_plugin*, nibble_error*);
  Entry* entry = nullptr;
  try {
    entry = &lib->library.get<Entry>(NIBBLE_PLUGIN_ENTRY_SYMBOL);
  } catch (const std::exception& e) {
    // The section headers named the symbol but the dynamic loader does not resolve it.
    report.message =
        std::string("the loaded library has no " NIBBLE_PLUGIN_ENTRY_SYMBOL ": ") + e.what();
    return nullptr;
  }
  lib->plugin.struct_size = sizeof(nibble_plugin);
  lib->plugin.abi_major = NIBBLE_ABI_MAJOR;
  lib->plugin.abi_minor = NIBBLE_ABI_MINOR;
  nibble_error err{};
  err.struct_size = sizeof err;
  try {
    lib->entry_status = entry(detail::host_table(), &lib->plugin, &err);
    err.message[sizeof err.message - 1] = '\0';
    lib->entry_message = escape_untrusted(err.message, 1024);
  } catch (...) {
    lib->entry_status = NIBBLE_INTERNAL;
    lib->entry_message = "the entry point threw a C++ exception across the C ABI";
  }
  // Registered after each entry, so it runs before the destructors of statics the plugin made
  // during its entry (exit handlers run in reverse order); shut_down flags make repeats no-ops.
  std::atexit(&shutdown_at_exit);
  LoadedLibrary* raw = lib.release();
  p.libraries[path] = raw;
  return raw;
}

std::string abi_string(int major, int minor) {
  return std::to_string(major) + "." + std::to_string(minor);
}

// Check the descriptor a plugin returned; returns "" when it is usable.
std::string validate_plugin(const nibble_plugin& d, const std::string& stem) {
  if (d.struct_size < kPluginMinSize)
    return "plugin descriptor of " + std::to_string(d.struct_size) + " bytes is smaller than ABI " +
           "1.0's " + std::to_string(kPluginMinSize);
  if (!d.name || !*d.name) return "the plugin has no name";
  if (stem != d.name)
    return "the plugin calls itself " + quoted_untrusted(d.name) + " but its file is libnibble_" +
           stem + ".so (the name must match the file)";
  if (!d.probe) return "required function 'probe' is NULL";
  if (!d.shutdown) return "required function 'shutdown' is NULL";
  if (d.kernel_count > 0 && !d.kernels) return "kernel_count is set but the kernel table is NULL";
  if (d.kernel_count > 4096) return "kernel_count " + std::to_string(d.kernel_count) + " is absurd";
  std::set<std::string> names;
  for (uint32_t i = 0; i < d.kernel_count; ++i) {
    const nibble_kernel* k = d.kernels[i];
    std::string at = "kernel #" + std::to_string(i);
    if (!k) return at + " is NULL";
    if (k->struct_size < kKernelMinSize)
      return at + ": descriptor of " + std::to_string(k->struct_size) + " bytes is smaller than " +
             "ABI 1.0's " + std::to_string(kKernelMinSize);
    if (!k->name || !*k->name) return at + " has no name";
    at = "kernel " + quoted_untrusted(k->name);
    if (!names.insert(k->name).second) return at + " is declared twice";
    if (k->op != NIBBLE_OP_LINEAR && k->op != NIBBLE_OP_DENSE && k->op != NIBBLE_OP_MOE)
      return at + ": unknown op " + std::to_string(k->op);
    const char* missing = !k->can_implement     ? "can_implement"
                          : !k->workspace_bytes ? "workspace_bytes"
                          : !k->prepare         ? "prepare"
                          : !k->forward         ? "forward"
                          : !k->release         ? "release"
                                                : nullptr;
    if (missing) return at + ": required function '" + missing + "' is NULL";
  }
  return "";
}

KernelInfo kernel_info(const std::string& backend, const nibble_kernel* k) {
  KernelInfo info;
  info.backend = backend;
  info.name = k->name;
  info.op = nibble_op(k->op);
  info.priority = k->priority;
  info.mode = nibble_numeric_mode(k->numeric_mode);
  info.bound_f32 = k->error_bound_f32;
  info.bound_f16 = k->error_bound_f16;
  info.bound_bf16 = k->error_bound_bf16;
  info.kernel = k;
  return info;
}

// Why loading code from `path` would let someone other than this user (or root) choose it, or ""
// when it is safe: world-writable, or owned by another user.
std::string unsafe_because(const std::string& path, const char* what) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return "";
  if (st.st_mode & S_IWOTH)
    return std::string(what) + " " + escape_untrusted(path) +
           " is world-writable: anyone could plant a plugin there";
  if (st.st_uid != 0 && st.st_uid != ::geteuid())
    return std::string(what) + " " + escape_untrusted(path) + " is owned by uid " +
           std::to_string(st.st_uid) + ", neither this user (uid " + std::to_string(::geteuid()) +
           ") nor root";
  return "";
}

// A file of a plugin folder whose name matches libnibble_<stem>.so.
struct Candidate {
  std::string path;    // in the searched folder
  std::string target;  // the canonical file a symlink leads to ("" when path is not a link)
  std::string stem;
  bool is_link() const { return !target.empty(); }
  // The file that is read and loaded.
  const std::string& library() const { return is_link() ? target : path; }
  // Both names for a link, for messages.
  std::string where() const {
    return is_link() ? escape_untrusted(path) + " -> " + escape_untrusted(target)
                     : escape_untrusted(path);
  }
};

// Resolve a symlink and check that what the name reaches is a regular file; "" when it is.
std::string resolve_candidate(Candidate& c) {
  struct stat st;
  if (::lstat(c.path.c_str(), &st) != 0)
    return std::string("cannot be examined: ") + std::strerror(errno);
  if (S_ISLNK(st.st_mode)) {
    std::error_code ec;
    fs::path target = fs::canonical(c.path, ec);
    if (ec) return "is a symbolic link that cannot be resolved: " + ec.message();
    c.target = target.string();
    if (::stat(c.target.c_str(), &st) != 0)
      return "is a symbolic link to " + escape_untrusted(c.target) +
             ", which cannot be examined: " + std::strerror(errno);
    if (!S_ISREG(st.st_mode))
      return "is a symbolic link to " + escape_untrusted(c.target) + ", which is " +
             detail::file_kind(st.st_mode) + ", not a regular file";
    // A link to another plugin's file would load that plugin under a name it does not have; it
    // loads under its own name from its own file instead.
    std::smatch m;
    const std::string target_name = target.filename().string();
    if (std::regex_match(target_name, m, plugin_file_pattern()) && m[1].str() != c.stem)
      return "skipped: libnibble_" + c.stem + ".so is a symbolic link to " +
             escape_untrusted(c.target) + ", the file of plugin '" + m[1].str() +
             "', which loads only under its own name";
    return "";
  }
  if (!S_ISREG(st.st_mode))
    return std::string("is ") + detail::file_kind(st.st_mode) + ", not a regular file";
  return "";
}

constexpr const char* kUnsafeHint =
    " (allow it with --allow-unsafe-plugin-dirs or NIBBLE_ALLOW_UNSAFE_PLUGIN_DIRS=1)";

}  // namespace

std::string Registry::default_plugin_dir() {
  // The plugins that ship with this libnibble sit in <its directory>/nibble/plugins, both in the
  // build tree and in an install.
  boost::dll::fs::error_code ec;
  fs::path self = boost::dll::this_line_location(ec);
  if (ec) return "";
  return (self.parent_path() / NIBBLE_PLUGIN_SUBDIR).string();
}

std::shared_ptr<const Registry> Registry::load(const RuntimeOptions& options) {
  auto reg = std::make_shared<Registry>();
  std::vector<std::string> dirs = options.plugin_dirs;
  if (options.use_default_plugin_dir) {
    std::string own = default_plugin_dir();
    if (!own.empty()) dirs.push_back(own);
  }
  detail::set_thread_budget(options.threads);

  std::set<std::string> seen_dirs, seen_files;
  std::vector<Candidate> files;
  for (const std::string& dir : dirs) {
    std::error_code ec;
    fs::path canonical = fs::weakly_canonical(fs::absolute(dir, ec), ec);
    std::string key = ec ? dir : canonical.string();
    if (!seen_dirs.insert(key).second) continue;
    reg->dirs_.push_back(key);
    if (!fs::is_directory(key, ec)) {
      LoadReport r;
      r.path = key;
      r.message = "plugin directory does not exist or is not a directory";
      reg->reports_.push_back(r);
      continue;
    }
    if (!options.allow_unsafe_plugin_dirs) {
      std::string why = unsafe_because(key, "plugin directory");
      if (!why.empty()) {
        LoadReport r;
        r.path = key;
        r.message = "refused: " + why + kUnsafeHint;
        reg->reports_.push_back(r);
        continue;
      }
    }
    std::vector<fs::path> entries;
    for (auto it = fs::directory_iterator(key, ec); !ec && it != fs::directory_iterator();
         it.increment(ec))
      entries.push_back(it->path());
    std::sort(entries.begin(), entries.end());
    for (const fs::path& entry : entries) {
      std::smatch m;
      std::string name = entry.filename().string();
      if (!std::regex_match(name, m, plugin_file_pattern())) continue;
      Candidate c;
      c.path = entry.string();
      c.stem = m[1].str();
      std::string problem = resolve_candidate(c);
      if (!problem.empty()) {
        LoadReport r;
        r.path = c.path;
        r.target = c.target;
        r.backend = c.stem;
        r.message = problem;
        reg->reports_.push_back(r);
        continue;
      }
      // One library may be reached under several names (a link beside its target); each name is
      // checked on its own, the library is loaded once.
      if (!seen_files.insert(c.library() + '\n' + c.stem).second) continue;
      files.push_back(std::move(c));
    }
  }

  Process& proc = process();
  std::lock_guard<std::mutex> lock(proc.mutex);
  for (const Candidate& c : files) {
    const std::string& path = c.library();
    const std::string& stem = c.stem;
    LoadReport r;
    r.path = c.path;
    r.target = c.target;
    r.backend = stem;
    auto fail = [&](LoadReport::Stage stage, const std::string& why) {
      r.stage = stage;
      r.message = why;
      reg->reports_.push_back(r);
      log(LogLevel::Debug, "core", c.where() + ": " + stage_name(stage) + ": " + why);
    };
    if (!options.allowed_plugins.empty() &&
        std::find(options.allowed_plugins.begin(), options.allowed_plugins.end(), stem) ==
            options.allowed_plugins.end()) {
      fail(LoadReport::Stage::Scan, "skipped: '" + stem + "' is not in the plugin allow-list");
      continue;
    }
    std::string why;
    if (!options.allow_unsafe_plugin_dirs) {
      // The policy applies to the file that would be loaded and to the folder holding it, which
      // for a link is not the folder that was searched.
      why = unsafe_because(path, "plugin file");
      if (why.empty() && c.is_link())
        why = unsafe_because(fs::path(path).parent_path().string(), "plugin directory");
      if (!why.empty()) {
        fail(LoadReport::Stage::Scan, "refused: " + why + kUnsafeHint);
        continue;
      }
    }
    r.stage = LoadReport::Stage::Preflight;
    if (!exports_entry(path, &why)) {
      fail(LoadReport::Stage::Preflight, why);
      continue;
    }
    LoadedLibrary* lib = load_library(path, r);
    if (!lib) {
      fail(r.stage, r.message);
      continue;
    }
    if (lib->entry_status != NIBBLE_OK) {
      fail(LoadReport::Stage::Entry, "the entry point failed (status " +
                                         std::to_string(lib->entry_status) +
                                         "): " + lib->entry_message);
      continue;
    }
    const nibble_plugin& d = lib->plugin;
    std::string plugin_name =
        d.struct_size > offsetof(nibble_plugin, name) && d.name ? d.name : stem;
    if (d.abi_major != NIBBLE_ABI_MAJOR) {
      fail(LoadReport::Stage::Version,
           "plugin " + quoted_untrusted(plugin_name) + " was built for nibble ABI " +
               abi_string(d.abi_major, d.abi_minor) + ", this host implements " +
               abi_string(NIBBLE_ABI_MAJOR, NIBBLE_ABI_MINOR) + " (majors must match)");
      continue;
    }
    why = validate_plugin(d, stem);
    if (!why.empty() && c.is_link()) why += " (" + c.where() + ")";
    if (!why.empty()) {
      fail(LoadReport::Stage::Validate, why);
      continue;
    }
    if (const BackendInfo* other = reg->find(d.name)) {
      fail(LoadReport::Stage::Validate,
           "backend " + quoted_untrusted(d.name) + " is already provided by " +
               escape_untrusted(other->file) + "; this copy is ignored");
      continue;
    }
    BackendInfo b;
    b.name = d.name;
    b.version = d.version ? d.version : "";
    b.vendor = d.vendor ? d.vendor : "";
    b.description = d.description ? d.description : "";
    b.file = path;  // the library itself, also when it was reached through a link
    b.abi_major = d.abi_major;
    b.abi_minor = d.abi_minor;
    b.plugin = &d;
    r.stage = LoadReport::Stage::Probe;
    nibble_probe_result probe{};
    probe.struct_size = sizeof probe;
    nibble_status ps = NIBBLE_INTERNAL;
    try {
      ps = d.probe(&probe);
    } catch (...) {
      std::strcpy(probe.detail, "probe threw a C++ exception across the C ABI");
    }
    probe.detail[sizeof probe.detail - 1] = '\0';
    b.available = ps == NIBBLE_OK && probe.available != 0;
    b.probe_reasons = probe.reasons;
    b.probe_detail = escape_untrusted(probe.detail);
    if (ps != NIBBLE_OK && b.probe_detail.empty())
      b.probe_detail = "probe failed with status " + std::to_string(ps);
    for (uint32_t i = 0; i < d.kernel_count; ++i)
      b.kernels.push_back(kernel_info(b.name, d.kernels[i]));
    r.stage = LoadReport::Stage::Loaded;
    r.ok = true;
    r.backend = b.name;
    reg->reports_.push_back(r);
    reg->backends_.push_back(std::move(b));
    log(LogLevel::Debug, "core", c.where() + ": loaded backend " + std::string(d.name));
  }
  return reg;
}

const BackendInfo* Registry::find(const std::string& name) const {
  for (const BackendInfo& b : backends_)
    if (b.name == name) return &b;
  return nullptr;
}

void shutdown_plugins() {
  Process& p = process();
  std::lock_guard<std::mutex> lock(p.mutex);
  shutdown_all_locked(p);
}

}  // namespace nibble
