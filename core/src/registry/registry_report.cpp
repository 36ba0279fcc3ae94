#include <nibble/registry_report.hpp>
#include <nibble/sdk/device.hpp>
#include <nibble/untrusted_text.hpp>

#include <fmt/core.h>

namespace nibble {

const char* op_label(int op) {
  return op == NIBBLE_OP_LINEAR ? "linear" : op == NIBBLE_OP_DENSE ? "dense" : "moe";
}

nlohmann::json registry_report(const Registry& reg) {
  nlohmann::json j;
  j["searched_dirs"] = nlohmann::json::array();
  for (const auto& d : reg.searched_dirs()) j["searched_dirs"].push_back(escape_untrusted(d));
  j["files"] = nlohmann::json::array();
  for (const auto& r : reg.reports())
    j["files"].push_back({{"path", escape_untrusted(r.path)},
                          {"target", escape_untrusted(r.target)},
                          {"loaded", r.ok},
                          {"stage", stage_name(r.stage)},
                          {"message", r.message},
                          {"backend", r.backend}});
  j["backends"] = nlohmann::json::array();
  for (const auto& b : reg.backends()) {
    nlohmann::json kb = nlohmann::json::array();
    for (const auto& k : b.kernels)
      kb.push_back(
          {{"name", escape_untrusted(k.name)},
           {"op", op_label(k.op)},
           {"priority", k.priority},
           {"mode", mode_name(k.mode)},
           {"device", sdk::device_type_name(k.device_type)},
           {"error_bound", {{"f32", k.bound_f32}, {"f16", k.bound_f16}, {"bf16", k.bound_bf16}}}});
    nlohmann::json backend = {{"name", escape_untrusted(b.name)},
                              {"version", escape_untrusted(b.version)},
                              {"vendor", escape_untrusted(b.vendor)},
                              {"description", escape_untrusted(b.description)},
                              {"file", escape_untrusted(b.file)},
                              {"abi", fmt::format("{}.{}", b.abi_major, b.abi_minor)},
                              {"available", b.available},
                              {"probe", b.probe_detail},
                              {"kernels", kb}};
    if (b.device_memory)
      backend["devices"] = {{"type", sdk::device_type_name(b.device_memory->device_type)},
                            {"count", b.device_count}};
    j["backends"].push_back(backend);
  }
  return j;
}

}  // namespace nibble
