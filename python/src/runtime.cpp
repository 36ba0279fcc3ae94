// nibble.Runtime: loads the plugins once and builds layers. Its options resolve as the CLI's do:
// an argument given here over the environment (NIBBLE_BACKEND, NIBBLE_PLUGIN_PATH, ...) over a
// config file (config= or NIBBLE_CONFIG) over the defaults.
#include <nibble/error.hpp>
#include <nibble/options.hpp>
#include <nibble/registry_report.hpp>
#include <nibble/runtime.hpp>

#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <filesystem>
#include <optional>

#include "bindings.hpp"
#include "json_to_python.hpp"

namespace nibble::python {

namespace {

// The CLI's --threads range.
constexpr int kMaxThreads = 4096;

RuntimeOptions resolve_options(const std::optional<std::string>& backend,
                               const std::vector<std::filesystem::path>& plugin_dirs,
                               std::optional<int> threads, const std::optional<std::string>& mode,
                               const std::optional<std::filesystem::path>& config,
                               const std::optional<std::vector<std::string>>& plugins,
                               bool use_default_plugin_dir, bool allow_unsafe_plugin_dirs) {
  RuntimeOptions o;
  if (config) apply_config_file(o, config->string());
  apply_environment(o);
  // The caller's directories come before the environment's (both before the default one).
  std::vector<std::string> dirs;
  for (const auto& d : plugin_dirs) dirs.push_back(d.string());
  o.plugin_dirs.insert(o.plugin_dirs.begin(), dirs.begin(), dirs.end());
  if (backend) {
    parse_backend_list(*backend, "backend");
    o.backend = *backend;
  }
  if (threads) {
    if (*threads < 0 || *threads > kMaxThreads)
      throw InvalidArgument("threads: " + std::to_string(*threads) + " is not in [0, " +
                            std::to_string(kMaxThreads) + "] (0: every hardware thread)");
    o.threads = *threads;
  }
  if (mode) o.mode = parse_mode(*mode, "mode");
  if (plugins) o.allowed_plugins = *plugins;
  if (!use_default_plugin_dir) o.use_default_plugin_dir = false;
  if (allow_unsafe_plugin_dirs) o.allow_unsafe_plugin_dirs = true;
  return o;
}

}  // namespace

void bind_runtime(py::module_& m) {
  py::class_<Runtime> runtime(
      m, "Runtime",
      "Loads the backend plugins once and builds layers on them. A bad plugin is "
      "reported in backends()['files'], never raised.");
  runtime
      .def(py::init([](std::optional<std::string> backend,
                       std::vector<std::filesystem::path> plugin_dirs, std::optional<int> threads,
                       std::optional<std::string> mode, std::optional<std::filesystem::path> config,
                       std::optional<std::vector<std::string>> plugins, bool use_default_plugin_dir,
                       bool allow_unsafe_plugin_dirs) {
             RuntimeOptions o =
                 resolve_options(backend, plugin_dirs, threads, mode, config, plugins,
                                 use_default_plugin_dir, allow_unsafe_plugin_dirs);
             py::gil_scoped_release nogil;
             return std::make_unique<Runtime>(std::move(o));
           }),
           py::arg("backend") = py::none(),
           py::arg("plugin_dirs") = std::vector<std::filesystem::path>{},
           py::arg("threads") = py::none(), py::arg("mode") = py::none(), py::kw_only(),
           py::arg("config") = py::none(), py::arg("plugins") = py::none(),
           py::arg("use_default_plugin_dir") = true, py::arg("allow_unsafe_plugin_dirs") = false,
           "backend: 'auto', a backend name (strict) or a fallback list 'a,b,*'; plugin_dirs: "
           "searched first; threads: per layer, 0 = every hardware thread; mode: 'w4a16' or "
           "'w4a8'; config: a JSON runtime config file; plugins: the names allowed to load. "
           "Unset arguments come from NIBBLE_* variables, then the config file, then the "
           "defaults.")
      .def(
          "backends",
          [](const Runtime& rt) { return json_to_python(registry_report(rt.registry())); },
          "What `nibble backends --json` says: {'searched_dirs', 'files', 'backends'}, each "
          "backend with its kernels and their error bounds.")
      .def_property_readonly(
          "backend", [](const Runtime& rt) { return rt.options().backend; },
          "the backend setting in force")
      .def_property_readonly(
          "threads", [](const Runtime& rt) { return rt.options().threads; },
          "threads per layer (0: every hardware thread)")
      .def_property_readonly(
          "mode", [](const Runtime& rt) { return std::string(mode_name(rt.options().mode)); },
          "'w4a16' or 'w4a8'")
      .def(
          "linear",
          [](const Runtime& rt, const Checkpoint& ckpt, const std::string& prefix) {
            py::gil_scoped_release nogil;
            return rt.linear(ckpt, prefix);
          },
          py::arg("checkpoint"), py::arg("prefix"),
          "Build linear layer `prefix` of `checkpoint` (quantized or dense): decode, select a "
          "kernel, prepare. The layer does not keep the checkpoint.")
      .def(
          "moe",
          [](const Runtime& rt, const Checkpoint& ckpt, const std::string& prefix,
             std::optional<int> top_k, std::optional<bool> renormalize,
             std::optional<std::string> scoring) {
            MoeOptions o;
            if (top_k) {
              if (*top_k <= 0)
                throw InvalidArgument("top_k: " + std::to_string(*top_k) +
                                      " must be positive (or None for the checkpoint's)");
              o.top_k = *top_k;
            }
            o.renormalize = renormalize;
            if (scoring) o.scoring = *scoring;
            py::gil_scoped_release nogil;
            return rt.moe(ckpt, prefix, o);
          },
          py::arg("checkpoint"), py::arg("prefix"), py::arg("top_k") = py::none(),
          py::arg("renormalize") = py::none(), py::arg("scoring") = py::none(),
          "Build MoE block `prefix` (router and experts). top_k, renormalize and scoring "
          "('softmax' or 'sigmoid') default to the checkpoint's config.");
  bind_layers_from_tensors(runtime);
}

}  // namespace nibble::python
