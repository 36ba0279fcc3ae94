// ABI hygiene: what a host relies on before it computes anything — one exported symbol, the
// name matching the file, versions and struct sizes, required function pointers, unique kernel
// names, no threads from entry or probe, caller capacities respected, a second entry call that
// gives the same answer, and (ABI 1.3) device memory that works for a plugin with device kernels.
#include <cmath>
#include <cstring>
#include <regex>
#include <set>

#include <nibble/registry.hpp>  // the loader's own preflight
#include "suite.hpp"

namespace nibble::conformance {

namespace {

const char* op_name(int32_t op) {
  switch (op) {
    case NIBBLE_OP_LINEAR:
      return "linear";
    case NIBBLE_OP_DENSE:
      return "dense";
    case NIBBLE_OP_MOE:
      return "moe";
    default:
      return nullptr;
  }
}

void fail(CheckResult& r, const std::string& why) {
  r.passed = false;
  r.message += (r.message.empty() ? "" : "; ") + why;
}

void check_exports(const SuiteContext& ctx, CheckResult& r) {
  const nibble::PluginExports e = nibble::plugin_exports(ctx.options.plugin_path);
  if (!e.problem.empty()) return fail(r, "not a well-formed ELF64 shared object: " + e.problem);
  std::vector<std::string> extra;
  bool has_entry = false;
  for (const std::string& n : e.names) {
    if (n == NIBBLE_PLUGIN_ENTRY_SYMBOL)
      has_entry = true;
    else
      extra.push_back(n);
  }
  if (!has_entry) fail(r, "nibble_plugin_entry is not exported");
  if (!extra.empty())
    fail(r, std::to_string(extra.size()) + (e.truncated ? " or more" : "") +
                " symbols besides nibble_plugin_entry are exported (" + join_limited(extra, 8) +
                "); build with nibble_add_plugin, whose version script hides them");
  if (r.passed) r.message = "exports exactly nibble_plugin_entry";
}

void check_names(const SuiteContext& ctx, CheckResult& r) {
  const nibble_plugin& p = ctx.plugin.desc;
  if (ctx.file_stem_name.empty())
    return fail(r, "the file is not named libnibble_<name>.so (a-z, 0-9, _)");
  if (!p.name) return fail(r, "the descriptor's name is NULL");
  if (ctx.file_stem_name != p.name)
    fail(r, "the plugin calls itself '" + std::string(p.name) + "' but the file says '" +
                ctx.file_stem_name + "'");
  if (!ctx.options.backend.empty() && ctx.options.backend != p.name)
    fail(r, "--backend " + ctx.options.backend + " was asked for, the plugin is '" + p.name + "'");
  if (r.passed) r.message = std::string("name '") + p.name + "' matches the file";
}

void check_versions(const SuiteContext& ctx, CheckResult& r) {
  const nibble_plugin& p = ctx.plugin.desc;
  if (p.abi_major != NIBBLE_ABI_MAJOR)
    fail(r, "ABI major " + std::to_string(p.abi_major) + ", this kit implements " +
                std::to_string(NIBBLE_ABI_MAJOR));
  if (p.struct_size < plugin_size_v10() || p.struct_size > sizeof(nibble_plugin))
    fail(r, "nibble_plugin.struct_size stored back is " + std::to_string(p.struct_size) +
                "; expected between the 1.0 size " + std::to_string(plugin_size_v10()) +
                " and the host's capacity " + std::to_string(sizeof(nibble_plugin)));
  static const std::regex semver(R"(^[0-9]+\.[0-9]+\.[0-9]+([-+].*)?$)");
  if (!p.version || !std::regex_match(p.version, semver))
    fail(r,
         std::string("version '") + (p.version ? p.version : "(null)") + "' is not semver (x.y.z)");
  if (!p.vendor || !p.description) fail(r, "vendor or description is NULL");
  if (r.passed)
    r.message = "ABI " + std::to_string(p.abi_major) + "." + std::to_string(p.abi_minor) +
                ", struct_size " + std::to_string(p.struct_size) + ", version " + p.version;
}

void check_functions(const SuiteContext& ctx, CheckResult& r) {
  const nibble_plugin& p = ctx.plugin.desc;
  if (!p.probe) fail(r, "probe is NULL");
  if (!p.shutdown) fail(r, "shutdown is NULL");
  if (std::string why = sdk::host::load_calls_problem(p); !why.empty()) fail(r, why);
  if (p.kernel_count == 0) fail(r, "kernel_count is 0");
  if (p.kernel_count > 0 && !p.kernels) fail(r, "kernels is NULL");
  if (!p.kernels) return;
  for (uint32_t i = 0; i < p.kernel_count; ++i) {
    const nibble_kernel* k = p.kernels[i];
    if (!k) {
      fail(r, "kernels[" + std::to_string(i) + "] is NULL");
      continue;
    }
    std::string missing = missing_kernel_functions(k);
    if (!missing.empty())
      fail(r,
           std::string("kernel ") + (k->name ? k->name : "(unnamed)") + ": " + missing + " NULL");
  }
  if (r.passed) r.message = std::to_string(p.kernel_count) + " kernels, every required pointer set";
}

void check_kernels(const SuiteContext& ctx, CheckResult& r) {
  std::set<std::string> names;
  for (const nibble_kernel* k : kernels_of(ctx.plugin.desc)) {
    if (!k) continue;
    std::string who = std::string("kernel ") + (k->name ? k->name : "(unnamed)");
    if (!k->name || !*k->name) fail(r, "a kernel has no name");
    if (k->name && !names.insert(k->name).second) fail(r, who + " is listed twice");
    if (k->struct_size < kernel_size_v10())
      fail(r, who + ": struct_size " + std::to_string(k->struct_size) + " < the 1.0 size " +
                  std::to_string(kernel_size_v10()));
    if (!op_name(k->op)) fail(r, who + ": unknown op " + std::to_string(k->op));
    if (k->numeric_mode < NIBBLE_MODE_FLOAT || k->numeric_mode > NIBBLE_MODE_W4A8)
      fail(r, who + ": unknown numeric mode " + std::to_string(k->numeric_mode));
    for (double b : {k->error_bound_f32, k->error_bound_f16, k->error_bound_bf16})
      if (!(std::isfinite(b) && b > 0 && b < 1)) {
        fail(r, who + ": error bounds must be in (0, 1), got f32 " + sci(k->error_bound_f32) +
                    ", f16 " + sci(k->error_bound_f16) + ", bf16 " + sci(k->error_bound_bf16));
        break;
      }
  }
  if (r.passed) r.message = join_limited(std::vector<std::string>(names.begin(), names.end()), 16);
}

void check_probe(const SuiteContext& ctx, CheckResult& r) {
  const nibble_probe_result& pr = ctx.probe;
  if (ctx.probe_escaped) return fail(r, "a C++ exception escaped probe");
  if (ctx.probe_status != NIBBLE_OK)
    fail(r, "probe returned status " + std::to_string(ctx.probe_status));
  if (pr.struct_size > sizeof pr || pr.struct_size < offsetof(nibble_probe_result, detail))
    fail(r, "probe stored back struct_size " + std::to_string(pr.struct_size));
  if (strnlen(pr.detail, sizeof pr.detail) == sizeof pr.detail)
    fail(r, "detail is not NUL-terminated");
  if (!pr.available && (pr.reasons == 0 || pr.detail[0] == '\0'))
    fail(r, "unavailable without reason bits and text");
  if (r.passed)
    r.message = std::string(pr.available ? "available" : "unavailable") + ": " +
                std::string(pr.detail, strnlen(pr.detail, sizeof pr.detail));
}

void check_entry_twice(const SuiteContext& ctx, CheckResult& r) {
  nibble_plugin again{};
  std::string message;
  nibble_status s = call_entry(ctx.plugin, &again, sizeof again, &message);
  if (s != NIBBLE_OK) return fail(r, "the second entry call failed: " + message);
  const nibble_plugin& a = ctx.plugin.desc;
  auto same_str = [](const char* x, const char* y) {
    return (x == nullptr) == (y == nullptr) && (!x || std::strcmp(x, y) == 0);
  };
  if (!same_str(a.name, again.name) || !same_str(a.version, again.version) ||
      a.abi_major != again.abi_major || a.abi_minor != again.abi_minor ||
      a.struct_size != again.struct_size)
    fail(r, "name, version, ABI or struct_size differ between two entry calls");
  if (a.kernel_count != again.kernel_count)
    return fail(r, "kernel_count " + std::to_string(a.kernel_count) + " then " +
                       std::to_string(again.kernel_count));
  for (uint32_t i = 0; a.kernels && again.kernels && i < a.kernel_count; ++i)
    if (!a.kernels[i] || !again.kernels[i] || !same_str(a.kernels[i]->name, again.kernels[i]->name))
      fail(r, "kernel " + std::to_string(i) + " differs between two entry calls");
  // A plugin with loads made a second one: end it, as a host ends every load it starts.
  if (sdk::host::has_load_calls(again) &&
      !guarded("shutdown2", [&] { sdk::host::shutdown_load(again); }))
    fail(r, "a C++ exception escaped shutdown2 of the second load");
  if (r.passed) r.message = "the same descriptor twice";
}

// A plugin whose kernels run on a device must give device memory of that type that allocates,
// copies both ways and synchronizes (the kit stages every device kernel's tensors through it);
// where it offers events, they time those copies and refuse to time events never recorded.
void check_device_memory(const SuiteContext& ctx, CheckResult& r) {
  const nibble_plugin& p = ctx.plugin.desc;
  std::set<int32_t> types;
  for (const nibble_kernel* k : kernels_of(p))
    if (k && sdk::host::is_device_kernel(k)) types.insert(sdk::host::kernel_device_type(k));
  if (types.empty()) {
    r.message = "not applicable: every kernel runs on the CPU";
    return;
  }
  const sdk::host::Device device = plugin_device(p);
  if (!device) {
#if NIBBLE_ABI_MINOR >= 3
    const std::string why = sdk::host::device_memory_problem(p);
#else
    const std::string why;
#endif
    return fail(r, "kernels run on " + sdk::device_type_name(*types.begin()) + " but the plugin " +
                       (why.empty() ? std::string("gives no device memory") : why));
  }
  for (int32_t t : types)
    if (t != device.dl_device().device_type)
      fail(r, "a kernel runs on " + sdk::device_type_name(t) + ", the device memory is " +
                  sdk::device_type_name(device.dl_device().device_type));
  if (!r.passed) return;
  if (!ctx.probe.available) {
    r.message = "the table is complete; not exercised, the backend is unavailable here";
    return;
  }
  std::string message;
  int32_t count = 0;
  const nibble_status s = status_of(
      [&] {
        count = device.count();
        if (count < 1) return;
        const char sent[32] = "nibble conformance device bytes";
        char back[32] = {};
        sdk::host::DeviceBuffer buffer = device.alloc(sizeof sent);
        sdk::host::DeviceEvent start, end;
        if (device.has_events()) {
          start = device.event();
          end = device.event();
          const nibble_status unrecorded =
              status_of([&] { (void)device.elapsed_seconds(start, end); }, nullptr);
          if (unrecorded == NIBBLE_OK)
            throw sdk::host::CallError(NIBBLE_INTERNAL, "device event elapsed",
                                       "timed two events never recorded without an error");
          start.record(nullptr);
        }
        buffer.upload(sent, sizeof sent, nullptr);
        buffer.download(back, sizeof back, nullptr);
        if (end.get()) end.record(nullptr);
        device.synchronize(nullptr);
        if (std::memcmp(sent, back, sizeof sent) != 0)
          throw sdk::host::CallError(NIBBLE_INTERNAL, "device copy",
                                     "the bytes copied back differ from those copied in");
        if (end.get()) {
          const double seconds = device.elapsed_seconds(start, end);
          if (!(seconds >= 0 && seconds < 60))
            throw sdk::host::CallError(NIBBLE_INTERNAL, "device event elapsed",
                                       "two copies of 32 bytes took " + std::to_string(seconds) +
                                           " s between their events");
        }
      },
      &message);
  if (s != NIBBLE_OK) return fail(r, "a device memory round trip failed: " + message);
  if (count < 1)
    return fail(r, "device_count is " + std::to_string(count) +
                       " on a machine where the probe "
                       "says the backend is available");
  r.message = std::to_string(count) + " " + sdk::device_type_name(device.dl_device().device_type) +
              " device(s); alloc, copy both ways and synchronize work on device 0, where the "
              "device kernels' tensors are staged; " +
              (device.has_events() ? "its events time the copies"
                                   : "no events (hosts time it on their own clock)");
}

// A host with a smaller descriptor than this one (an older or leaner host): the plugin must not
// write past the capacity it was given, and must say how much it filled.
void check_entry_capacity(const SuiteContext& ctx, CheckResult& r) {
  constexpr uint8_t kSentinel = 0xA5;
  std::vector<uint8_t> buffer(sizeof(nibble_plugin) + 64, kSentinel);
  const uint32_t capacity = uint32_t(offsetof(nibble_plugin, kernel_count));
  auto* out = reinterpret_cast<nibble_plugin*>(buffer.data());
  std::string message;
  nibble_status s = call_entry(ctx.plugin, out, capacity, &message);
  for (size_t i = capacity; i < buffer.size(); ++i)
    if (buffer[i] != kSentinel)
      return fail(r, "given a descriptor capacity of " + std::to_string(capacity) +
                         " bytes, the entry point wrote byte " + std::to_string(i));
  if (s == NIBBLE_OK && out->struct_size > capacity)
    fail(r, "stored back struct_size " + std::to_string(out->struct_size) + " > capacity " +
                std::to_string(capacity));
  if (r.passed) r.message = "wrote within a " + std::to_string(capacity) + "-byte capacity";
}

// Small caller-owned error and probe buffers: messages are cut, never written past.
void check_small_buffers(const SuiteContext& ctx, CheckResult& r) {
  constexpr uint8_t kSentinel = 0x5A;
  for (const nibble_kernel* k : kernels_of(ctx.plugin.desc)) {
    if (!k || !k->can_implement) continue;
    nibble_layer_desc d{};
    d.struct_size = sizeof d;
    d.op = k->op;
    d.name = "conformance.small_buffer";
    d.K = 64;
    d.N = 64;
    d.bits = 3;  // no kernel implements 3 bits; the refusal writes a reason
    d.group_size = 32;
    d.numeric_mode = k->numeric_mode;
    d.act_dtypes = NIBBLE_DTYPE_F32;
    d.weight_dtype = sdk::dtype_f16();
    std::vector<uint8_t> buffer(sizeof(nibble_error), kSentinel);
    auto* err = reinterpret_cast<nibble_error*>(buffer.data());
    const size_t capacity = offsetof(nibble_error, message) + 8;
    err->struct_size = uint32_t(capacity);
    int32_t ok = 1;
    if (!guarded("can_implement", [&] { ok = k->can_implement(k, &d, err); })) continue;
    for (size_t i = capacity; i < buffer.size(); ++i)
      if (buffer[i] != kSentinel) {
        fail(r, std::string("kernel ") + k->name + ": can_implement wrote past an 8-byte message");
        break;
      }
    if (!ok && strnlen(err->message, 8) == 8)
      fail(r, std::string("kernel ") + k->name + ": the cut message is not NUL-terminated");
  }
  if (ctx.plugin.desc.probe) {
    std::vector<uint8_t> buffer(sizeof(nibble_probe_result), kSentinel);
    auto* pr = reinterpret_cast<nibble_probe_result*>(buffer.data());
    const size_t capacity = offsetof(nibble_probe_result, detail) + 16;
    pr->struct_size = uint32_t(capacity);
    guarded("probe", [&] { ctx.plugin.desc.probe(pr); });
    for (size_t i = capacity; i < buffer.size(); ++i)
      if (buffer[i] != kSentinel) {
        fail(r, "probe wrote past a 16-byte detail");
        break;
      }
  }
  if (r.passed) r.message = "error and probe texts stay within the caller's capacity";
}

}  // namespace

std::vector<Check> abi_checks(SuiteContext& ctx) {
  const SuiteContext* c = &ctx;
  std::vector<Check> checks;
  auto add = [&](const char* name, void (*fn)(const SuiteContext&, CheckResult&)) {
    checks.push_back({std::string("abi/") + name, [c, fn](CheckResult& r) { fn(*c, r); }});
  };
  add("exports", &check_exports);
  add("name matches the file", &check_names);
  add("versions and struct sizes", &check_versions);
  add("required function pointers", &check_functions);
  add("kernel descriptors", &check_kernels);
  add("probe", &check_probe);
  add("entry and probe start no threads", &check_threads);
  add("entry twice gives the same answer", &check_entry_twice);
  add("entry respects the descriptor capacity", &check_entry_capacity);
  add("error and probe buffers respected", &check_small_buffers);
  add("device memory", &check_device_memory);
  return checks;
}

}  // namespace nibble::conformance
