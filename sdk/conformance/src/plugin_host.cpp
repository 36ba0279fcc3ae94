// The kit's host side of the C ABI (see plugin_host.hpp).
#include "plugin_host.hpp"

#include <dirent.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstring>

namespace nibble::conformance {

size_t kernel_size_v10() { return offsetof(nibble_kernel, release) + sizeof(void*); }
size_t host_size_v10() { return offsetof(nibble_host, log) + sizeof(void*); }
size_t plugin_size_v10() { return offsetof(nibble_plugin, shutdown) + sizeof(void*); }

std::vector<std::string>& escaped_exceptions() {
  static std::vector<std::string> list;
  return list;
}

std::string ErrorText::text() const {
  return std::string(e.message, strnlen(e.message, sizeof e.message));
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

#if NIBBLE_ABI_MINOR >= 1
int32_t kit_thread_budget(void*) { return g_thread_budget; }
#endif

// Plugins may log; the kit keeps quiet (the report is its output).
void kit_log(void*, int32_t, const char*, const char*) {}

}  // namespace

const nibble_host* kit_host(int thread_budget) {
  static nibble_host host{};
  g_thread_budget = thread_budget < 1 ? 1 : thread_budget;
  host.struct_size = sizeof host;
  host.abi_major = NIBBLE_ABI_MAJOR;
  host.abi_minor = NIBBLE_ABI_MINOR;
  host.host_version = "nibble-conformance";
  host.ctx = nullptr;
  host.log = &kit_log;
#if NIBBLE_ABI_MINOR >= 1
  host.thread_budget = &kit_thread_budget;
#endif
  return &host;
}

nibble_status call_entry(const LoadedPlugin& p, nibble_plugin* out, uint32_t capacity,
                         std::string* message) {
  std::memset(out, 0, capacity);
  out->struct_size = capacity;
  out->abi_major = NIBBLE_ABI_MAJOR;
  out->abi_minor = NIBBLE_ABI_MINOR;
  ErrorText err;
  nibble_status s = NIBBLE_INTERNAL;
  if (!guarded("nibble_plugin_entry",
               [&] { s = p.entry(kit_host(g_thread_budget), out, err.get()); })) {
    if (message) *message = "a C++ exception escaped nibble_plugin_entry";
    return NIBBLE_INTERNAL;
  }
  if (s != NIBBLE_OK && message) *message = err.text();
  return s;
}

LoadedPlugin load_plugin(const std::string& path, int thread_budget) {
  LoadedPlugin p;
  kit_host(thread_budget);
  p.handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!p.handle) {
    const char* e = dlerror();
    p.error = std::string("dlopen failed: ") + (e ? e : "unknown error");
    return p;
  }
  p.entry = reinterpret_cast<nibble_plugin_entry_fn>(dlsym(p.handle, NIBBLE_PLUGIN_ENTRY_SYMBOL));
  if (!p.entry) {
    p.error = "the library has no " NIBBLE_PLUGIN_ENTRY_SYMBOL " symbol";
    return p;
  }
  std::string message;
  p.entry_status = call_entry(p, &p.desc, sizeof p.desc, &message);
  if (p.entry_status != NIBBLE_OK)
    p.error = "nibble_plugin_entry returned status " + std::to_string(p.entry_status) + ": " +
              (message.empty() ? "(no message)" : message);
  return p;
}

std::vector<const nibble_kernel*> kernels_of(const nibble_plugin& p) {
  std::vector<const nibble_kernel*> out;
  if (!p.kernels) return out;
  for (uint32_t i = 0; i < p.kernel_count; ++i) out.push_back(p.kernels[i]);
  return out;
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
  ErrorText err;
  int32_t ok = 0;
  *accepted = false;
  if (!guarded("can_implement", [&] { ok = k->can_implement(k, &d, err.get()); }))
    return "(a C++ exception escaped can_implement)";
  if (ok) {
    *accepted = true;
    return "";
  }
  std::string text = err.text();
  return text.empty() ? std::string("(empty reason)") : text;
}

PreparedLayer::~PreparedLayer() {
  if (p_) guarded("release", [&] { k_->release(k_, p_); });
}

nibble_status PreparedLayer::forward_raw(const nibble_forward_args* args, int threads, int64_t M,
                                         std::string* message) const {
  ErrorText err;
  size_t ws = 0;
  nibble_status s = NIBBLE_INTERNAL;
  if (!guarded("workspace_bytes", [&] { s = k_->workspace_bytes(k_, p_, M, &ws, err.get()); })) {
    if (message) *message = "a C++ exception escaped workspace_bytes";
    return NIBBLE_INTERNAL;
  }
  if (s != NIBBLE_OK) {
    if (message) *message = "workspace_bytes: " + err.text();
    return s;
  }
  // A fresh, 64-byte aligned buffer per call: concurrent calls never share scratch.
  std::vector<uint8_t> buffer(ws + 64);
  nibble_exec exec{};
  exec.struct_size = sizeof exec;
  auto addr = reinterpret_cast<uintptr_t>(buffer.data());
  exec.workspace = reinterpret_cast<void*>((addr + 63) & ~uintptr_t(63));
  exec.workspace_size = ws;
  exec.num_threads = threads;
  s = NIBBLE_INTERNAL;
  if (!guarded("forward", [&] { s = k_->forward(k_, p_, args, &exec, err.get()); })) {
    if (message) *message = "a C++ exception escaped forward";
    return NIBBLE_INTERNAL;
  }
  if (s != NIBBLE_OK && message) *message = err.text();
  return s;
}

nibble_status PreparedLayer::forward(const DLTensor* x, DLTensor* y, const DLTensor* ids,
                                     const DLTensor* weights, int threads,
                                     std::string* message) const {
  nibble_forward_args args{};
  args.struct_size = sizeof args;
  args.x = x;
  args.y = y;
  args.topk_ids = ids;
  args.topk_weights = weights;
  return forward_raw(&args, threads, x->shape[0], message);
}

std::unique_ptr<PreparedLayer> prepare(const nibble_kernel* k, const nibble_layer_desc& d,
                                       const nibble_weight_input& in, nibble_status* status,
                                       std::string* message) {
  nibble_prepared* p = nullptr;
  ErrorText err;
  nibble_status s = NIBBLE_INTERNAL;
  if (!guarded("prepare", [&] { s = k->prepare(k, &d, &in, &p, err.get()); })) {
    *status = NIBBLE_INTERNAL;
    *message = "a C++ exception escaped prepare";
    return nullptr;
  }
  *status = s;
  if (s != NIBBLE_OK) {
    *message = err.text().empty() ? std::string("(no message)") : err.text();
    return nullptr;
  }
  if (!p) {
    *status = NIBBLE_INTERNAL;
    *message = "prepare returned NIBBLE_OK but no prepared handle";
    return nullptr;
  }
  return std::make_unique<PreparedLayer>(k, p);
}

std::unique_ptr<PreparedLayer> prepare_linear(const nibble_kernel* k, const nibble_layer_desc& d,
                                              const TestWeight& w, nibble_status* status,
                                              std::string* message) {
  nibble_canonical_weight cw = w.view();
  nibble_weight_input in{};
  in.struct_size = sizeof in;
  in.quantized = &cw;
  return prepare(k, d, in, status, message);
}

std::unique_ptr<PreparedLayer> prepare_dense(const nibble_kernel* k, const nibble_layer_desc& d,
                                             const TestDense& w, nibble_status* status,
                                             std::string* message) {
  nibble_dense_weight dw = w.view();
  nibble_weight_input in{};
  in.struct_size = sizeof in;
  in.dense = &dw;
  return prepare(k, d, in, status, message);
}

namespace {

// The expert source's bookkeeping: which experts are out, and any misuse seen.
struct ExpertSource {
  const TestExperts* experts = nullptr;
  std::vector<int> outstanding;
  std::string misuse;
};

nibble_status source_get(void* ctx, int32_t e, nibble_canonical_weight* w13,
                         nibble_canonical_weight* w2, nibble_error* error) {
  auto* s = static_cast<ExpertSource*>(ctx);
  if (e < 0 || size_t(e) >= s->experts->w13.size()) {
    s->misuse = "get_expert(" + std::to_string(e) + ") is out of range";
    if (error && error->struct_size > offsetof(nibble_error, message))
      std::snprintf(error->message, 64, "expert %d out of range", int(e));
    return NIBBLE_INVALID_ARGUMENT;
  }
  *w13 = s->experts->w13[size_t(e)].view();
  *w2 = s->experts->w2[size_t(e)].view();
  ++s->outstanding[size_t(e)];
  return NIBBLE_OK;
}

void source_put(void* ctx, int32_t e) {
  auto* s = static_cast<ExpertSource*>(ctx);
  if (e < 0 || size_t(e) >= s->outstanding.size() || s->outstanding[size_t(e)] == 0) {
    s->misuse = "put_expert(" + std::to_string(e) + ") without a matching get_expert";
    return;
  }
  --s->outstanding[size_t(e)];
}

}  // namespace

std::unique_ptr<PreparedLayer> prepare_moe(const nibble_kernel* k, const nibble_layer_desc& d,
                                           const TestExperts& experts, nibble_status* status,
                                           std::string* message) {
  ExpertSource state;
  state.experts = &experts;
  state.outstanding.assign(experts.w13.size(), 0);
  nibble_moe_source src{};
  src.struct_size = sizeof src;
  src.num_experts = int32_t(experts.w13.size());
  src.ctx = &state;
  src.get_expert = &source_get;
  src.put_expert = &source_put;
  nibble_weight_input in{};
  in.struct_size = sizeof in;
  in.experts = &src;
  auto p = prepare(k, d, in, status, message);
  if (p) {
    for (size_t e = 0; e < state.outstanding.size() && state.misuse.empty(); ++e)
      if (state.outstanding[e] != 0)
        state.misuse = "expert " + std::to_string(e) + " was taken with get_expert and never " +
                       "given back with put_expert";
    *message = state.misuse;
  }
  return p;
}

nibble_layer_desc moe_desc(const TestExperts& ex, int top_k, const char* name) {
  nibble_layer_desc d = ex.w13[0].linear_desc(name);
  d.op = NIBBLE_OP_MOE;
  d.K = ex.K;
  d.N = ex.I;
  d.has_bias = 0;
  d.num_experts = int32_t(ex.w13.size());
  d.top_k = top_k;
  d.activation = NIBBLE_ACT_SILU;
  d.w2_group_size = ex.w2[0].group_size;
  d.w2_has_g_idx = ex.w2[0].g_idx.empty() ? 0 : 1;
  bool sym13 = true, sym2 = true;
  for (size_t e = 0; e < ex.w13.size(); ++e) {
    sym13 = sym13 && ex.w13[e].is_symmetric();
    sym2 = sym2 && ex.w2[e].is_symmetric();
  }
  d.symmetric = sym13 ? 1 : 0;
  d.w2_symmetric = sym2 ? 1 : 0;
  d.has_g_idx = ex.w13[0].g_idx.empty() ? 0 : 1;
#if NIBBLE_ABI_MINOR >= 1
  d.max_zero = d.w2_max_zero = 0;
  for (size_t e = 0; e < ex.w13.size(); ++e)
    for (const auto* w : {&ex.w13[e], &ex.w2[e]}) {
      int z = w->zeros.empty() ? 0 : *std::max_element(w->zeros.begin(), w->zeros.end());
      int32_t& slot = w == &ex.w13[e] ? d.max_zero : d.w2_max_zero;
      slot = std::max<int32_t>(slot, z);
    }
#endif
  return d;
}

Tensor2D::Tensor2D(int64_t rows, int64_t cols, DLDataType dtype, int64_t row_stride) {
  const int64_t stride = row_stride > 0 ? row_stride : cols;
  // One spare element so a zero-size tensor still has a non-null data pointer.
  bytes.resize(size_t(rows * stride + 1) * sdk::dtype_bytes(dtype));
  shape[0] = rows;
  shape[1] = cols;
  strides[0] = stride;
  strides[1] = 1;
  t.data = bytes.data();
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = 2;
  t.dtype = dtype;
  t.shape = shape;
  t.strides = row_stride > 0 ? strides : nullptr;
  t.byte_offset = 0;
}

double Tensor2D::get(int64_t r, int64_t c) const {
  return sdk::load_float(bytes.data(), t.dtype, size_t(r * strides[0] + c));
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
