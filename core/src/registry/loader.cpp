// Registry::load: search the plugin folders (plugin_scan.hpp), then take each candidate file
// through preflight, entry, version check, validation and probe (plugin_loads.hpp holds the
// libraries and their loads). Every file gets a LoadReport; one bad file never stops the others.
#include <boost/dll/runtime_symbol_info.hpp>

#include <nibble/error.hpp>
#include <nibble/log.hpp>
#include <nibble/registry.hpp>
#include <nibble/sdk/device.hpp>
#include <nibble/sdk/host/device.hpp>
#include <nibble/untrusted_text.hpp>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <optional>
#include <set>

#include "elf_exports.hpp"
#include "host_table.hpp"
#include "plugin_loads.hpp"
#include "plugin_scan.hpp"

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

using detail::Candidate;
using detail::PluginLoad;

// The 1.0 layouts: what a plugin of any minor must provide.
constexpr size_t kPluginMinSize = offsetof(nibble_plugin, shutdown) + sizeof(void*);
constexpr size_t kKernelMinSize = offsetof(nibble_kernel, release) + sizeof(void*);

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

std::string abi_string(int major, int minor) {
  return std::to_string(major) + "." + std::to_string(minor);
}

// Why kernel #i of a plugin is unusable, or "".
std::string kernel_problem(const nibble_kernel* k, uint32_t i, std::set<std::string>& names) {
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
  return "";
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
  if (d.struct_size >= offsetof(nibble_plugin, shutdown2) + sizeof(void*) &&
      (d.probe2 == nullptr) != (d.shutdown2 == nullptr))
    return "probe2 and shutdown2 come as a pair, but only one of them is set";
  if (d.kernel_count > 0 && !d.kernels) return "kernel_count is set but the kernel table is NULL";
  if (d.kernel_count > 4096) return "kernel_count " + std::to_string(d.kernel_count) + " is absurd";
  std::set<std::string> names;
  for (uint32_t i = 0; i < d.kernel_count; ++i)
    if (std::string why = kernel_problem(d.kernels[i], i, names); !why.empty()) return why;
  if (std::string why = sdk::host::device_memory_problem(d); !why.empty()) return why;
  // A device kernel's tensors can only be made through its backend's device memory.
  const nibble_device_memory* memory = sdk::host::device_memory_of(d);
  for (uint32_t i = 0; i < d.kernel_count; ++i) {
    const int32_t type = sdk::host::kernel_device_type(d.kernels[i]);
    if (type != kDLCPU && (!memory || sdk::normal_device_type(memory->device_type) != type))
      return "kernel " + quoted_untrusted(d.kernels[i]->name) + " runs on " +
             sdk::device_type_name(type) + ", but the plugin gives no device memory of that type";
  }
  return "";
}

RegisteredKernel registered_kernel(const std::string& backend, const nibble_kernel* k) {
  RegisteredKernel info;
  info.backend = backend;
  info.name = k->name;
  info.op = nibble_op(k->op);
  info.priority = k->priority;
  info.mode = nibble_numeric_mode(k->numeric_mode);
  info.bound_f32 = k->error_bound_f32;
  info.bound_f16 = k->error_bound_f16;
  info.bound_bf16 = k->error_bound_bf16;
  info.device_type = sdk::host::kernel_device_type(k);
  info.kernel = k;
  return info;
}

// The backend a validated descriptor describes, read from `path`.
BackendInfo describe_backend(const nibble_plugin& d, const std::string& path) {
  BackendInfo b;
  b.name = d.name;
  b.version = d.version ? d.version : "";
  b.vendor = d.vendor ? d.vendor : "";
  b.description = d.description ? d.description : "";
  b.file = path;  // the library itself, also when it was reached through a link
  b.abi_major = d.abi_major;
  b.abi_minor = d.abi_minor;
  b.plugin = &d;
  b.device_memory = sdk::host::device_memory_of(d);
  for (uint32_t i = 0; i < d.kernel_count; ++i)
    b.kernels.push_back(registered_kernel(b.name, d.kernels[i]));
  return b;
}

// Ask the load whether its backend is usable here.
void probe_backend(const PluginLoad& load, BackendInfo& b) {
  nibble_probe_result probe{};
  probe.struct_size = sizeof probe;
  nibble_status ps = NIBBLE_INTERNAL;
  try {
    ps = load.probe(&probe);
  } catch (...) {
    std::strcpy(probe.detail, "probe threw a C++ exception across the C ABI");
  }
  probe.detail[sizeof probe.detail - 1] = '\0';
  b.available = ps == NIBBLE_OK && probe.available != 0;
  b.probe_reasons = probe.reasons;
  b.probe_detail = escape_untrusted(probe.detail);
  if (ps != NIBBLE_OK && b.probe_detail.empty())
    b.probe_detail = "probe failed with status " + std::to_string(ps);
  if (b.available && b.device_memory) {
    try {
      b.device_count = b.device(0).count();
    } catch (const std::exception& e) {
      b.device_count = 0;
      log(LogLevel::Warning, "core",
          "backend " + b.name + ": device_count failed: " + escape_untrusted(e.what(), 1000));
    }
  }
}

// What one Registry::load call shares across its candidates.
struct LoadContext {
  const RuntimeOptions& options;
  const std::shared_ptr<const detail::HostTable>& host;
  const Registry& registry;  // the backends registered so far
  // Every load entered, kept by the registry (so that none ends while the loads lock is held).
  std::vector<std::shared_ptr<PluginLoad>>& keep;
  std::map<detail::LoadedLibrary*, std::shared_ptr<PluginLoad>> entered;
};

std::nullopt_t refuse(LoadReport& r, LoadReport::Stage stage, std::string why) {
  r.stage = stage;
  r.message = std::move(why);
  return std::nullopt;
}

// One candidate from policy to probe. On failure r says at which stage and why.
std::optional<BackendInfo> load_candidate(const Candidate& c, LoadContext& ctx, LoadReport& r) {
  const std::string& path = c.library();
  if (std::string why = detail::policy_refusal(c, ctx.options); !why.empty())
    return refuse(r, LoadReport::Stage::Scan, why);
  std::string why;
  if (!exports_entry(path, &why)) return refuse(r, LoadReport::Stage::Preflight, why);
  detail::LoadedLibrary* lib = detail::open_library(path, r);
  if (!lib) return refuse(r, r.stage, r.message);
  const std::shared_ptr<PluginLoad> entered = detail::enter_plugin(*lib, ctx.host, ctx.entered);
  if (std::find(ctx.keep.begin(), ctx.keep.end(), entered) == ctx.keep.end())
    ctx.keep.push_back(entered);
  const PluginLoad& load = *entered;
  if (load.entry_status != NIBBLE_OK)
    return refuse(r, LoadReport::Stage::Entry,
                  "the entry point failed (status " + std::to_string(load.entry_status) +
                      "): " + load.entry_message);
  const nibble_plugin& d = load.plugin;
  if (d.abi_major != NIBBLE_ABI_MAJOR) {
    std::string name = d.struct_size > offsetof(nibble_plugin, name) && d.name ? d.name : c.stem;
    return refuse(r, LoadReport::Stage::Version,
                  "plugin " + quoted_untrusted(name) + " was built for nibble ABI " +
                      abi_string(d.abi_major, d.abi_minor) + ", this host implements " +
                      abi_string(NIBBLE_ABI_MAJOR, NIBBLE_ABI_MINOR) + " (majors must match)");
  }
  why = validate_plugin(d, c.stem);
  if (!why.empty() && c.is_link()) why += " (" + c.where() + ")";
  if (!why.empty()) return refuse(r, LoadReport::Stage::Validate, why);
  if (const BackendInfo* other = ctx.registry.find(d.name))
    return refuse(r, LoadReport::Stage::Validate,
                  "backend " + quoted_untrusted(d.name) + " is already provided by " +
                      escape_untrusted(other->file) + "; this copy is ignored");
  BackendInfo b = describe_backend(d, path);
  r.stage = LoadReport::Stage::Probe;
  probe_backend(load, b);
  return b;
}

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
  reg->host_ = std::make_shared<const detail::HostTable>(options.threads);
  std::vector<std::string> dirs = options.plugin_dirs;
  if (options.use_default_plugin_dir) {
    std::string own = default_plugin_dir();
    if (!own.empty()) dirs.push_back(own);
  }
  const std::vector<Candidate> files =
      detail::find_candidates(dirs, options, reg->dirs_, reg->reports_);

  std::lock_guard<std::mutex> lock(detail::loads_mutex());
  LoadContext ctx{options, reg->host_, *reg, reg->loads_, {}};
  for (const Candidate& c : files) {
    LoadReport r;
    r.path = c.path;
    r.target = c.target;
    r.backend = c.stem;
    std::optional<BackendInfo> b = load_candidate(c, ctx, r);
    if (!b) {
      log(LogLevel::Debug, "core", c.where() + ": " + stage_name(r.stage) + ": " + r.message);
      reg->reports_.push_back(r);
      continue;
    }
    r.stage = LoadReport::Stage::Loaded;
    r.ok = true;
    r.backend = b->name;
    log(LogLevel::Debug, "core", c.where() + ": loaded backend " + b->name);
    reg->reports_.push_back(r);
    reg->backends_.push_back(std::move(*b));
  }
  return reg;
}

sdk::host::Device BackendInfo::device(int32_t device_id) const {
  if (!device_memory || !plugin) return {};
  return sdk::host::Device(device_memory, plugin->plugin_context, device_id);
}

const BackendInfo* Registry::find(const std::string& name) const {
  for (const BackendInfo& b : backends_)
    if (b.name == name) return &b;
  return nullptr;
}

void shutdown_plugins() {
  std::lock_guard<std::mutex> lock(detail::loads_mutex());
  detail::shutdown_loads_locked();
}

}  // namespace nibble
