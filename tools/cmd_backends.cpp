// nibble backends [--json]: every plugin file looked at and its outcome, each backend's version,
// availability with the probe's reason, its devices (for a device backend) and its kernels with
// the device each runs on.
#include <nibble/registry.hpp>
#include <nibble/sdk/device.hpp>
#include <nibble/untrusted_text.hpp>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <cstdio>

#include "cli_options.hpp"
#include "commands.hpp"

namespace {

const char* op_label(int op) {
  return op == NIBBLE_OP_LINEAR ? "linear" : op == NIBBLE_OP_DENSE ? "dense" : "moe";
}

nlohmann::json to_json(const nibble::Registry& reg) {
  nlohmann::json j;
  j["searched_dirs"] = nlohmann::json::array();
  for (const auto& d : reg.searched_dirs())
    j["searched_dirs"].push_back(nibble::escape_untrusted(d));
  j["files"] = nlohmann::json::array();
  for (const auto& r : reg.reports())
    j["files"].push_back({{"path", nibble::escape_untrusted(r.path)},
                          {"target", nibble::escape_untrusted(r.target)},
                          {"loaded", r.ok},
                          {"stage", nibble::stage_name(r.stage)},
                          {"message", r.message},
                          {"backend", r.backend}});
  j["backends"] = nlohmann::json::array();
  for (const auto& b : reg.backends()) {
    nlohmann::json kb = nlohmann::json::array();
    for (const auto& k : b.kernels)
      kb.push_back(
          {{"name", nibble::escape_untrusted(k.name)},
           {"op", op_label(k.op)},
           {"priority", k.priority},
           {"mode", nibble::mode_name(k.mode)},
           {"device", nibble::sdk::device_type_name(k.device_type)},
           {"error_bound", {{"f32", k.bound_f32}, {"f16", k.bound_f16}, {"bf16", k.bound_bf16}}}});
    nlohmann::json backend = {{"name", nibble::escape_untrusted(b.name)},
                              {"version", nibble::escape_untrusted(b.version)},
                              {"vendor", nibble::escape_untrusted(b.vendor)},
                              {"description", nibble::escape_untrusted(b.description)},
                              {"file", nibble::escape_untrusted(b.file)},
                              {"abi", fmt::format("{}.{}", b.abi_major, b.abi_minor)},
                              {"available", b.available},
                              {"probe", b.probe_detail},
                              {"kernels", kb}};
    if (b.device_memory)
      backend["devices"] = {{"type", nibble::sdk::device_type_name(b.device_memory->device_type)},
                            {"count", b.device_count}};
    j["backends"].push_back(backend);
  }
  return j;
}

void print_text(const nibble::Registry& reg) {
  fmt::print("Searched for plugins in:\n");
  for (const auto& d : reg.searched_dirs()) fmt::print("  {}\n", nibble::escape_untrusted(d));
  fmt::print("\nPlugin files:\n");
  if (reg.reports().empty()) fmt::print("  (none found)\n");
  for (const auto& r : reg.reports()) {
    std::string where = nibble::escape_untrusted(r.path);
    if (!r.target.empty()) where += " -> " + nibble::escape_untrusted(r.target);
    if (r.ok)
      fmt::print("  loaded   {}\n", where);
    else
      fmt::print("  FAILED   {}\n           at {}: {}\n", where, nibble::stage_name(r.stage),
                 r.message);
  }
  fmt::print("\nBackends:\n");
  if (reg.backends().empty()) fmt::print("  (none)\n");
  for (const auto& b : reg.backends()) {
    fmt::print("  {} {} ({}), ABI {}.{} — {}\n", nibble::escape_untrusted(b.name),
               nibble::escape_untrusted(b.version), nibble::escape_untrusted(b.vendor), b.abi_major,
               b.abi_minor, b.available ? "available" : "UNAVAILABLE");
    fmt::print("    probe: {}\n", b.probe_detail.empty() ? "-" : b.probe_detail);
    if (b.device_memory)
      fmt::print("    devices: {} {}\n", b.device_count,
                 nibble::sdk::device_type_name(b.device_memory->device_type));
    if (b.kernels.empty()) {
      fmt::print("    kernels: none yet (this backend declares no kernel)\n");
      continue;
    }
    for (const auto& k : b.kernels)
      fmt::print(
          "    kernel {:<16} {:<7} priority {:<4} mode {:<20} device {:<7} bound f32 {:.0e} f16 "
          "{:.0e} bf16 {:.0e}\n",
          nibble::escape_untrusted(k.name), op_label(k.op), k.priority, nibble::mode_name(k.mode),
          nibble::sdk::device_type_name(k.device_type), k.bound_f32, k.bound_f16, k.bound_bf16);
  }
}

}  // namespace

int nibble_cmd_backends(int argc, char** argv) {
  auto args = nibble::cli::to_args(argc, argv);
  if (nibble::cli::wants_help(args)) {
    fmt::print(
        "usage: nibble backends [--json] [runtime flags]\n\n"
        "Lists every plugin file looked at and what became of it, each backend with its\n"
        "version, availability (and the probe's reason), the devices it finds (a device\n"
        "backend) and its kernels with the device each runs on.\n\n{}\n"
        "example: nibble backends --plugin-dir ./my-plugins --json\n",
        nibble::cli::common_flags_help());
    return 0;
  }
  auto flags = nibble::cli::take_common_flags(args);
  bool json = false;
  for (const auto& a : args) {
    if (a == "--json")
      json = true;
    else {
      std::fprintf(stderr, "nibble backends: unknown option %s (see --help)\n",
                   nibble::quoted_untrusted(a).c_str());
      return 2;
    }
  }
  auto reg = nibble::Registry::load(nibble::cli::resolve_options(flags));
  if (json)
    fmt::print("{}\n", to_json(*reg).dump(2));
  else
    print_text(*reg);
  return 0;
}
