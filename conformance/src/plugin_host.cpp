// The kit's host side of the C ABI (see plugin_host.hpp).
#include "plugin_host.hpp"

#include <dirent.h>

namespace nibble::conformance {

namespace host = sdk::host;

size_t kernel_size_v10() { return offsetof(nibble_kernel, release) + sizeof(void*); }
size_t host_size_v10() { return offsetof(nibble_host, log) + sizeof(void*); }
size_t plugin_size_v10() { return offsetof(nibble_plugin, shutdown) + sizeof(void*); }

std::vector<std::string>& escaped_exceptions() {
  static std::vector<std::string> list;
  return list;
}

void note_escape(const host::CallError& e) {
  if (e.escaped()) escaped_exceptions().push_back(e.call() + ": " + e.message());
}

int thread_count() {
  DIR* d = opendir("/proc/self/task");
  if (!d) return -1;
  int n = 0;
  while (dirent* e = readdir(d))
    if (e->d_name[0] != '.') ++n;
  closedir(d);
  return n;
}

namespace {
int g_thread_budget = 2;
// The plugin under test's device, for its device kernels (one plugin per kit process).
sdk::host::Device g_device;
}  // namespace

sdk::host::Device plugin_device(const nibble_plugin& p) {
#if NIBBLE_ABI_MINOR >= 3
  return host::device_of(p, 0);
#else
  (void)p;
  return {};
#endif
}

void stage_on_device_of(const nibble_plugin& p) { g_device = plugin_device(p); }

sdk::host::Device tensor_device(const nibble_kernel* k) {
  return host::is_device_kernel(k) ? g_device : sdk::host::Device();
}

nibble_layer_desc on_kernel_device(const nibble_kernel* k, nibble_layer_desc d) {
  if (host::is_device_kernel(k))
    host::set_layer_device(d, DLDevice{DLDeviceType(host::kernel_device_type(k)), 0});
  return d;
}

nibble_status call_entry(const PluginUnderTest& p, nibble_plugin* out, uint32_t capacity,
                         std::string* message) {
  return status_of(
      [&] {
        std::string said;
        const nibble_status s =
            host::call_entry(p.entry, host::standalone_host(g_thread_budget), out, capacity, &said);
        if (s != NIBBLE_OK) throw host::CallError(s, NIBBLE_PLUGIN_ENTRY_SYMBOL, said);
      },
      message);
}

PluginUnderTest load_plugin(const std::string& path, int thread_budget) {
  PluginUnderTest p;
  g_thread_budget = thread_budget;
  try {
    p.entry = host::open_entry(path);
  } catch (const host::CallError& e) {
    p.error = e.call() + " failed: " + e.message();
    return p;
  }
  std::string message;
  p.entry_status = call_entry(p, &p.desc, sizeof p.desc, &message);
  if (p.entry_status == NIBBLE_OK) g_device = plugin_device(p.desc);
  if (p.entry_status != NIBBLE_OK)
    p.error = "nibble_plugin_entry returned status " + std::to_string(p.entry_status) + ": " +
              (message.empty() ? "(no message)" : message);
  return p;
}

std::string missing_kernel_functions(const nibble_kernel* k) {
  std::string missing;
  auto need = [&](const void* fn, const char* name) {
    if (!fn) missing += std::string(missing.empty() ? "" : ", ") + name;
  };
  need(reinterpret_cast<const void*>(k->can_implement), "can_implement");
  need(reinterpret_cast<const void*>(k->workspace_bytes), "workspace_bytes");
  need(reinterpret_cast<const void*>(k->prepare), "prepare");
  need(reinterpret_cast<const void*>(k->forward), "forward");
  need(reinterpret_cast<const void*>(k->release), "release");
  return missing;
}

std::string why_not(const nibble_kernel* k, const nibble_layer_desc& d, bool* accepted) {
  std::string reason;
  *accepted = false;
  try {
    *accepted = host::can_implement(k, on_kernel_device(k, d), &reason);
  } catch (const host::CallError& e) {
    note_escape(e);
    return "(a C++ exception escaped can_implement)";
  }
  return *accepted ? std::string() : reason;
}

PreparedLayer::~PreparedLayer() {
  status_of([&] { p_.release(); }, nullptr);
}

nibble_status PreparedLayer::forward_raw(const nibble_forward_args* args, int threads, int64_t M,
                                         std::string* message) const {
  // A fresh workspace per call: concurrent calls never share scratch.
  host::Workspace ws;
  const sdk::host::Device device = tensor_device(p_.kernel());
  if (!device) return status_of([&] { p_.forward(*args, M, threads, ws); }, message);
  // Each call stages its own copies, on the default stream.
  return status_of(
      [&] {
        sdk::host::StagedForward staged(device, *args, nullptr);
        p_.forward(staged.args(), M, threads, ws);
        staged.finish();
      },
      message);
}

nibble_status PreparedLayer::forward_as_given(const nibble_forward_args* args, int threads,
                                              int64_t M, std::string* message) const {
  host::Workspace ws;
  return status_of([&] { p_.forward(*args, M, threads, ws); }, message);
}

nibble_status PreparedLayer::forward(const DLTensor* x, DLTensor* y, const DLTensor* ids,
                                     const DLTensor* weights, int threads,
                                     std::string* message) const {
  const nibble_forward_args args = host::forward_args(*x, *y, ids, weights);
  return forward_raw(&args, threads, x->shape[0], message);
}

std::unique_ptr<PreparedLayer> prepare(const nibble_kernel* k, const nibble_layer_desc& d,
                                       const nibble_weight_input& in, nibble_status* status,
                                       std::string* message) {
  std::unique_ptr<PreparedLayer> out;
  const nibble_layer_desc on_device = on_kernel_device(k, d);
  *status = status_of(
      [&] { out = std::make_unique<PreparedLayer>(host::prepare(k, on_device, in)); }, message);
  if (*status != NIBBLE_OK && message->empty()) *message = "(no message)";
  return out;
}

std::unique_ptr<PreparedLayer> prepare_linear(const nibble_kernel* k, const nibble_layer_desc& d,
                                              const CanonicalWeight& w, nibble_status* status,
                                              std::string* message) {
  const nibble_canonical_weight view = w.view();
  return prepare(k, d, host::quantized_input(view), status, message);
}

std::unique_ptr<PreparedLayer> prepare_dense(const nibble_kernel* k, const nibble_layer_desc& d,
                                             const TestDense& w, nibble_status* status,
                                             std::string* message) {
  const nibble_dense_weight view = w.view();
  return prepare(k, d, host::dense_input(view), status, message);
}

std::unique_ptr<PreparedLayer> prepare_moe(const nibble_kernel* k, const nibble_layer_desc& d,
                                           const TestExperts& experts, nibble_status* status,
                                           std::string* message) {
  host::ExpertViews views = expert_views(experts);
  auto p = prepare(k, d, host::experts_input(views.source()), status, message);
  if (p) *message = views.misuse();
  return p;
}

const char* dtype_flag_name(uint32_t flag) {
  switch (flag) {
    case NIBBLE_DTYPE_F32:
      return "f32";
    case NIBBLE_DTYPE_F16:
      return "f16";
    default:
      return "bf16";
  }
}

DLDataType dtype_of_flag(uint32_t flag) {
  switch (flag) {
    case NIBBLE_DTYPE_F32:
      return sdk::dtype_f32();
    case NIBBLE_DTYPE_F16:
      return sdk::dtype_f16();
    default:
      return sdk::dtype_bf16();
  }
}

double bound_for(const nibble_kernel* k, uint32_t flag) {
  switch (flag) {
    case NIBBLE_DTYPE_F32:
      return k->error_bound_f32;
    case NIBBLE_DTYPE_F16:
      return k->error_bound_f16;
    default:
      return k->error_bound_bf16;
  }
}

}  // namespace nibble::conformance
