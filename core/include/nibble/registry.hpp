// The plugin registry: which files were looked at and what became of each, the backends they
// provide (their kernels, and the devices and device memory of device backends), and kernel
// selection by name, "auto" or a fallback list, for a layer on one device. A Registry is an
// immutable snapshot, safe to read from many threads.
#pragma once

#include <nibble/sdk/plugin.h>
#include <nibble/export.hpp>
#include <nibble/options.hpp>
#include <nibble/sdk/host/device.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace nibble {

namespace detail {
class HostTable;
struct PluginLoad;
}  // namespace detail

/// What happened to one plugin file.
struct LoadReport {
  /// How far loading got: a file fails at the first stage that goes wrong.
  enum class Stage { Scan, Preflight, Load, Entry, Version, Validate, Probe, Loaded };
  std::string path;    ///< the file in the searched folder (a symlink's own path)
  std::string target;  ///< the canonical file a symlink leads to; "" when path is no symlink
  Stage stage = Stage::Scan;
  bool ok = false;      ///< loaded and registered
  std::string message;  ///< why it failed or was skipped ("" when ok)
  std::string backend;  ///< the backend name, once known
};

/// The name of a stage ("preflight", "entry", ...).
NIBBLE_API const char* stage_name(LoadReport::Stage stage);

/// One kernel of a loaded backend, as the registry records it (what the plugin declared for it,
/// its backend and its descriptor).
struct RegisteredKernel {
  std::string backend;
  std::string name;
  nibble_op op = NIBBLE_OP_LINEAR;
  int priority = 0;
  nibble_numeric_mode mode = NIBBLE_MODE_W4A16;
  double bound_f32 = 0, bound_f16 = 0, bound_bf16 = 0;
  /// The DLDeviceType forward's tensors live on (kDLCPU for a plugin before ABI 1.3).
  int32_t device_type = kDLCPU;
  const nibble_kernel* kernel = nullptr;  ///< the plugin's descriptor (lives with its registry)
  /// "backend/kernel".
  std::string full_name() const { return backend + "/" + name; }
};

/// A loaded backend.
struct BackendInfo {
  std::string name, version, vendor, description;
  std::string file;
  int abi_major = 0, abi_minor = 0;
  bool available = false;
  uint32_t probe_reasons = 0;
  std::string probe_detail;
  std::vector<RegisteredKernel> kernels;
  /// The descriptor of this registry's load of the plugin (lives as long as the registry). A
  /// plugin of ABI 1.2 or later is loaded once per registry, and the load ends (shutdown2) when
  /// the registry and the layers made from it are gone; an older one is loaded once per process,
  /// its one descriptor shared by every registry.
  const nibble_plugin* plugin = nullptr;
  /// The device memory of this load (ABI 1.3), present when a kernel runs on a device.
  const nibble_device_memory* device_memory = nullptr;
  /// Devices of device_memory's type the backend finds on this machine (0 without device memory,
  /// or when the backend is unavailable).
  int device_count = 0;
  /// Device `device_id` of this load's device memory, to allocate, fill and read tensors for its
  /// kernels; empty for a backend without device memory.
  NIBBLE_API sdk::host::Device device(int32_t device_id) const;
};

/// A kernel chosen for a layer, with the candidates passed over and why.
struct Selection {
  const BackendInfo* backend = nullptr;
  const RegisteredKernel* kernel = nullptr;
  /// One line per candidate tried before the winner ("npu_ref/linear: reason"), and unavailable
  /// backends; empty when the first candidate won.
  std::vector<std::string> passed_over;
  /// Further candidates that also accept the layer, in order: tried when the winner's prepare
  /// answers UNSUPPORTED (something only the weight's values reveal).
  std::vector<std::pair<const BackendInfo*, const RegisteredKernel*>> later;
};

/// The name of an ABI numeric mode (nibble_numeric_mode): "w4a16", "w4a8" or "float".
NIBBLE_API const char* mode_name(int mode);

/// An immutable set of loaded backends with the report of every file looked at.
class NIBBLE_API Registry {
 public:
  /// Look in the option's directories (and the default one), load every libnibble_*.so found
  /// there, and probe each backend. Never throws for a bad plugin: it goes into reports().
  static std::shared_ptr<const Registry> load(const RuntimeOptions& options);

  /// Every plugin file looked at, in scan order.
  const std::vector<LoadReport>& reports() const { return reports_; }
  /// Every loaded backend, available or not, by name.
  const std::vector<BackendInfo>& backends() const { return backends_; }
  /// The directories that were searched, in order.
  const std::vector<std::string>& searched_dirs() const { return dirs_; }
  /// The backend called `name`, or nullptr.
  const BackendInfo* find(const std::string& name) const;

  /// Choose a kernel for `desc` under `backend` ("auto", a name, or a comma-separated list), among
  /// the kernels of the device desc.device_type asks for: "auto" and "*" consider only those; a
  /// named backend's kernels of another device are passed over with that reason. Throws
  /// nibble::Error listing every candidate's reason, every unavailable backend's probe reason and
  /// every file that failed to load when nothing fits.
  Selection select(const nibble_layer_desc& desc, const std::string& backend) const;

  /// For every loaded backend and kernel of desc's op: whether it could run the layer and, if
  /// not, why ("cpu_amx/linear_a16: can run (priority 100)", "npu_ref: unavailable: ...").
  std::vector<std::string> explain(const nibble_layer_desc& desc) const;

  /// The directory of plugins that ship with this libnibble (lib/nibble/plugins beside it).
  static std::string default_plugin_dir();

 private:
  std::vector<LoadReport> reports_;
  std::vector<BackendInfo> backends_;
  std::vector<std::string> dirs_;
  // The host table this registry's plugins were entered with (their log and thread budget).
  std::shared_ptr<const detail::HostTable> host_;
  // The loads this registry entered; a plugin's load per registry ends when the registry and
  // every layer made from it are gone (layers hold the registry).
  std::vector<std::shared_ptr<detail::PluginLoad>> loads_;
  std::string failure_summary() const;
};

/// What the loader's preflight reads from a plugin file without loading it.
struct PluginExports {
  std::string problem;  ///< why it is not a well-formed ELF64 shared object ("" when it is)
  std::vector<std::string> names;  ///< its defined, default-visibility dynamic symbols
  bool truncated = false;          ///< whether it exports more names than were listed
};

/// The loader's preflight of the file `path`: its exported symbols, read by bounded reads that
/// trust nothing the file claims (the file is never loaded).
NIBBLE_API PluginExports plugin_exports(const std::string& path);

/// End every plugin load once (shutdown2, or shutdown for a plugin before ABI 1.2; also run at
/// process exit). Layers must be released first; afterwards no loaded plugin may be used.
NIBBLE_API void shutdown_plugins();

}  // namespace nibble
