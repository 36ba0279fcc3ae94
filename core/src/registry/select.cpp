// Kernel selection: one name (strict), "auto" (priority among available backends) or a fallback
// list (per layer, the first that can). When nothing fits, one error says everything: each
// candidate's reason, each unavailable backend's probe reason, each file that failed to load.
#include <nibble/error.hpp>
#include <nibble/options.hpp>
#include <nibble/registry.hpp>
#include <nibble/sdk/device.hpp>
#include <nibble/sdk/host/device.hpp>
#include <nibble/untrusted_text.hpp>

#include <algorithm>

namespace nibble {

const char* mode_name(int mode) {
  switch (mode) {
    case NIBBLE_MODE_FLOAT:
      return "float";
    case NIBBLE_MODE_W4A16:
      return "w4a16";
    case NIBBLE_MODE_W4A8:
      return "w4a8";
  }
  return "unknown";
}

namespace {

const char* op_name(int op) {
  switch (op) {
    case NIBBLE_OP_LINEAR:
      return "quantized linear";
    case NIBBLE_OP_DENSE:
      return "dense linear";
    case NIBBLE_OP_MOE:
      return "MoE";
  }
  return "unknown op";
}

std::string describe(const nibble_layer_desc& d) {
  std::string s =
      std::string(op_name(d.op)) + " K=" + std::to_string(d.K) + " N=" + std::to_string(d.N);
  if (d.op != NIBBLE_OP_DENSE) {
    s += " bits=" + std::to_string(d.bits) + " group=" + std::to_string(d.group_size) +
         (d.has_g_idx ? " act-order" : "") + (d.symmetric ? " sym" : " asym") + " mode " +
         mode_name(d.numeric_mode);
  }
  if (d.op == NIBBLE_OP_MOE)
    s += " experts=" + std::to_string(d.num_experts) + " top_k=" + std::to_string(d.top_k) +
         " w2_group=" + std::to_string(d.w2_group_size);
  return s + " on " + sdk::device_name(sdk::host::layer_device_of(d));
}

// Why kernel `k` of `b` cannot take a layer on desc's device ("" when it can): another device
// type, or an index the backend does not have.
std::string why_not_device(const BackendInfo& b, const RegisteredKernel& k,
                           const nibble_layer_desc& d) {
  const DLDevice layer = sdk::host::layer_device_of(d);
  if (k.device_type != layer.device_type)
    return "runs on " + sdk::device_type_name(k.device_type) + ", the layer is on " +
           sdk::device_name(layer);
  if (k.device_type == kDLCPU || layer.device_id < b.device_count) return "";
  return "the backend finds " + std::to_string(b.device_count) + " " +
         sdk::device_type_name(k.device_type) + " device" + (b.device_count == 1 ? "" : "s") +
         ", the layer is on " + sdk::device_name(layer);
}

// Whether `k` runs on the device type desc asks for (what "auto" considers).
bool on_layer_device_type(const RegisteredKernel& k, const nibble_layer_desc& d) {
  return k.device_type == sdk::host::layer_device_of(d).device_type;
}

// Kernels of `b` for this op (and mode, for quantized ops), highest priority first.
std::vector<const RegisteredKernel*> kernels_for(const BackendInfo& b, const nibble_layer_desc& d) {
  std::vector<const RegisteredKernel*> out;
  for (const RegisteredKernel& k : b.kernels) {
    if (k.op != d.op) continue;
    if (d.op != NIBBLE_OP_DENSE && k.mode != d.numeric_mode) continue;
    out.push_back(&k);
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const RegisteredKernel* a, const RegisteredKernel* b) {
                     return a->priority > b->priority;
                   });
  return out;
}

std::string can_implement(const RegisteredKernel& k, const nibble_layer_desc& d) {
  nibble_error err{};
  err.struct_size = sizeof err;
  int32_t ok = 0;
  try {
    ok = k.kernel->can_implement(k.kernel, &d, &err);
  } catch (...) {
    return "can_implement threw a C++ exception across the C ABI";
  }
  if (ok) return "";
  err.message[sizeof err.message - 1] = '\0';
  return err.message[0] ? err.message : "refused without giving a reason";
}

}  // namespace

std::string Registry::failure_summary() const {
  std::string s;
  for (const BackendInfo& b : backends_)
    if (!b.available) s += "\n  backend " + b.name + " is unavailable: " + b.probe_detail;
  for (const LoadReport& r : reports_)
    if (!r.ok)
      s += "\n  plugin file " + escape_untrusted(r.path) +
           (r.target.empty() ? "" : " -> " + escape_untrusted(r.target)) + " failed at " +
           stage_name(r.stage) + ": " + r.message;
  if (backends_.empty()) {
    s += "\n  no backend is loaded; searched:";
    for (const auto& d : dirs_) s += " " + escape_untrusted(d);
  }
  return s;
}

std::vector<std::string> Registry::explain(const nibble_layer_desc& desc) const {
  std::vector<std::string> lines;
  for (const BackendInfo& b : backends_) {
    auto ks = kernels_for(b, desc);
    if (!b.available) {
      lines.push_back("backend " + b.name + ": unavailable: " + b.probe_detail);
      continue;
    }
    if (ks.empty()) {
      lines.push_back("backend " + b.name + ": no " + op_name(desc.op) + " kernel" +
                      (desc.op == NIBBLE_OP_DENSE
                           ? std::string()
                           : std::string(" for mode ") + mode_name(desc.numeric_mode)));
      continue;
    }
    for (const RegisteredKernel* k : ks) {
      std::string why = why_not_device(b, *k, desc);
      if (why.empty()) why = can_implement(*k, desc);
      lines.push_back(
          k->full_name() + ": " +
          (why.empty() ? "can run it (priority " + std::to_string(k->priority) + ")" : why));
    }
  }
  return lines;
}

Selection Registry::select(const nibble_layer_desc& desc, const std::string& backend) const {
  const std::string layer = desc.name ? desc.name : "(unnamed layer)";
  std::vector<std::string> names = parse_backend_list(backend, "backend");
  const bool strict = names.size() == 1 && names[0] != "auto" && names[0] != "*";

  Selection sel;
  std::vector<std::string> tried;
  std::vector<const BackendInfo*> used;
  auto try_kernels =
      [&](const std::vector<std::pair<const BackendInfo*, const RegisteredKernel*>>& cands) {
        for (auto& [b, k] : cands) {
          std::string why = why_not_device(*b, *k, desc);
          if (why.empty()) why = can_implement(*k, desc);
          if (why.empty()) {
            if (!sel.kernel) {
              sel.backend = b;
              sel.kernel = k;
            } else {
              sel.later.emplace_back(b, k);
            }
            continue;
          }
          if (!sel.kernel) tried.push_back(k->full_name() + ": " + why);
        }
        return sel.kernel != nullptr;
      };
  auto auto_candidates = [&]() {
    std::vector<std::pair<const BackendInfo*, const RegisteredKernel*>> c;
    for (const BackendInfo& b : backends_) {
      if (std::find(used.begin(), used.end(), &b) != used.end()) continue;
      if (!b.available) continue;
      for (const RegisteredKernel* k : kernels_for(b, desc))
        if (on_layer_device_type(*k, desc)) c.emplace_back(&b, k);
    }
    std::stable_sort(c.begin(), c.end(), [](const auto& x, const auto& y) {
      if (x.second->priority != y.second->priority) return x.second->priority > y.second->priority;
      return x.first->name < y.first->name;
    });
    return c;
  };

  for (const std::string& name : names) {
    if (name == "auto" || name == "*") {
      try_kernels(auto_candidates());
      continue;
    }
    const BackendInfo* b = find(name);
    if (!b) {
      std::string known;
      for (const BackendInfo& x : backends_) known += (known.empty() ? "" : ", ") + x.name;
      std::string msg = "backend '" + name +
                        "' is not loaded (loaded backends: " + (known.empty() ? "none" : known) +
                        ")";
      if (strict) throw Error("layer " + layer + ": " + msg + failure_summary());
      if (!sel.kernel) tried.push_back(msg);
      continue;
    }
    used.push_back(b);
    if (!b->available) {
      std::string msg = "backend " + name + " is unavailable here: " + b->probe_detail;
      if (strict) throw Error("layer " + layer + ": " + msg);
      if (!sel.kernel) tried.push_back(msg);
      continue;
    }
    auto ks = kernels_for(*b, desc);
    if (ks.empty()) {
      if (!sel.kernel)
        tried.push_back("backend " + name + " has no " + op_name(desc.op) + " kernel" +
                        (desc.op == NIBBLE_OP_DENSE
                             ? std::string()
                             : std::string(" for mode ") + mode_name(desc.numeric_mode)));
      continue;
    }
    std::vector<std::pair<const BackendInfo*, const RegisteredKernel*>> c;
    for (const RegisteredKernel* k : ks) c.emplace_back(b, k);
    try_kernels(c);
  }
  if (sel.kernel) {
    sel.passed_over = tried;
    return sel;
  }
  std::string msg = "no kernel can run layer " + layer + " (" + describe(desc) +
                    ") with backend setting '" + backend + "'";
  for (const auto& t : tried) msg += "\n  " + t;
  if (tried.empty())
    msg += "\n  no available backend has a kernel for this op and mode on " +
           sdk::device_type_name(sdk::host::layer_device_of(desc).device_type);
  msg += failure_summary();
  throw Error(msg);
}

}  // namespace nibble
