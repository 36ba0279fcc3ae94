// The C++ layer over plugin.h: a plugin author writes ordinary classes (a Backend, some Kernels,
// their Prepared weights) and one macro, NIBBLE_PLUGIN(BackendClass). This header generates the C
// tables, stamps struct sizes, validates tensors the same way for every plugin, and turns every
// exception into a status at the boundary. Header-only; needs C++17.
#pragma once

#include <nibble/sdk/plugin.h>
#include <nibble/sdk/device.hpp>
#include <nibble/sdk/numeric.hpp>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

// NIBBLE_PLUGIN_EXPORT's older name, kept for the plugins that use it.
#define NIBBLE_EXPORT NIBBLE_PLUGIN_EXPORT

namespace nibble::sdk {

/// An error a plugin throws; it crosses the ABI as `status` with `what()` as the message.
class Error : public std::runtime_error {
 public:
  /// An error with a status code and a message.
  Error(nibble_status status, const std::string& message)
      : std::runtime_error(message), status_(status) {}
  /// The status reported to the host.
  nibble_status status() const { return status_; }

 private:
  nibble_status status_;
};

/// Throw INVALID_ARGUMENT with `message` unless `condition` holds.
inline void require(bool condition, const std::string& message) {
  if (!condition) throw Error(NIBBLE_INVALID_ARGUMENT, message);
}

/// Copy `text` into a caller-owned nibble_error, respecting its declared capacity.
inline void write_error(nibble_error* error, const std::string& text) {
  if (!error || error->struct_size <= offsetof(nibble_error, message)) return;
  size_t capacity = std::min<size_t>(error->struct_size - offsetof(nibble_error, message),
                                     NIBBLE_ERROR_MESSAGE_CAPACITY);
  size_t n = std::min(text.size(), capacity - 1);
  std::memcpy(error->message, text.data(), n);
  error->message[n] = '\0';
}

/// Whether a field at `offset` of `size` bytes lies inside a struct of `struct_size` bytes.
constexpr bool has_field(uint32_t struct_size, size_t offset, size_t size) {
  return offset + size <= struct_size;
}

/// The host's services, as seen by this plugin. Set once by the entry point.
class Host {
 public:
  /// Remember the host table and this plugin's name (called by the entry point).
  static void set(const nibble_host* host, const char* plugin) {
    state().host = host;
    state().plugin = plugin;
  }
  /// The host table, or nullptr before the entry point ran.
  static const nibble_host* get() { return state().host; }
  /// The host's ABI minor (0 when unknown).
  static int abi_minor() { return state().host ? state().host->abi_minor : 0; }
  /// Log a line through the host (dropped when the host gave no logger).
  static void log(int32_t level, const std::string& message) {
    const nibble_host* h = state().host;
    if (h && has_field(h->struct_size, offsetof(nibble_host, log), sizeof(void*)) && h->log)
      h->log(h->ctx, level, state().plugin, message.c_str());
  }
  /// Threads the host lets this plugin use: the host's budget when its ABI has one, else the
  /// hardware's concurrency.
  static int thread_budget() {
    int fallback = int(std::max(1u, std::thread::hardware_concurrency()));
#if NIBBLE_ABI_MINOR >= 1
    const nibble_host* h = state().host;
    if (h && h->abi_minor >= 1 &&
        has_field(h->struct_size, offsetof(nibble_host, thread_budget), sizeof(void*)) &&
        h->thread_budget) {
      int n = h->thread_budget(h->ctx);
      return n >= 1 ? n : 1;
    }
#endif
    return fallback;
  }

 private:
  struct State {
    const nibble_host* host = nullptr;
    const char* plugin = "";
  };
  static State& state() {
    static State* s = new State;  // never destroyed, as plugin_state()
    return *s;
  }
};

/// The largest effective zero point the host reports for the layer's weight (`w2` for MoE's
/// down projection), or 0 when the host is older than ABI 1.1 or does not know.
inline int max_zero(const nibble_layer_desc& d, bool w2 = false) {
#if NIBBLE_ABI_MINOR >= 1
  size_t offset =
      w2 ? offsetof(nibble_layer_desc, w2_max_zero) : offsetof(nibble_layer_desc, max_zero);
  if (!has_field(d.struct_size, offset, sizeof(int32_t))) return 0;
  return w2 ? d.w2_max_zero : d.max_zero;
#else
  (void)d;
  (void)w2;
  return 0;
#endif
}

/// A validated 2-D view of a DLTensor: rows × cols, unit column stride, row stride in elements.
struct Matrix {
  char* data = nullptr;
  DLDataType dtype{};
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t stride = 0;

  /// Pointer to row r, as T.
  template <class T>
  T* row(int64_t r) const {
    return reinterpret_cast<T*>(data + size_t(r) * size_t(stride) * dtype_bytes(dtype));
  }
  /// Element (r, c) as float (f32/f16/bf16 only).
  float get(int64_t r, int64_t c) const {
    return load_float(data, dtype, size_t(r) * size_t(stride) + size_t(c));
  }
  /// Store float v at (r, c) (f32/f16/bf16 only).
  void set(int64_t r, int64_t c, float v) const {
    store_float(data, dtype, size_t(r) * size_t(stride) + size_t(c), v);
  }
  /// Integer element (r, c) of an int32/int64 matrix.
  int64_t get_int(int64_t r, int64_t c) const {
    size_t i = size_t(r) * size_t(stride) + size_t(c);
    return dtype.bits == 64 ? reinterpret_cast<const int64_t*>(data)[i]
                            : reinterpret_cast<const int32_t*>(data)[i];
  }
};

/// Check that `t` is a 2-D CPU tensor with unit column stride and view it; `what` names it.
inline Matrix as_matrix(const DLTensor* t, const char* what) {
  require(t != nullptr, std::string(what) + ": tensor is missing");
  require(t->ndim == 2, std::string(what) + ": expected a 2-D tensor, got " +
                            std::to_string(t->ndim) + " dimensions");
  require(is_cpu_memory(t->device), std::string(what) + ": expected a CPU tensor");
  require(t->dtype.lanes == 1 && t->dtype.bits % 8 == 0 && t->dtype.bits > 0,
          std::string(what) + ": unsupported dtype " + dtype_name(t->dtype));
  require(t->shape != nullptr && t->shape[0] >= 0 && t->shape[1] >= 0,
          std::string(what) + ": bad shape");
  Matrix m;
  m.dtype = t->dtype;
  m.rows = t->shape[0];
  m.cols = t->shape[1];
  m.stride = m.cols;
  if (t->strides) {
    require(t->strides[1] == 1 || m.cols <= 1,
            std::string(what) + ": columns must be contiguous (stride 1), got stride " +
                std::to_string(t->strides[1]));
    require(t->strides[0] >= m.cols || m.rows <= 1,
            std::string(what) + ": row stride " + std::to_string(t->strides[0]) +
                " is smaller than the row length " + std::to_string(m.cols));
    if (m.rows > 1) m.stride = t->strides[0];
  }
  require(t->data != nullptr || m.rows * m.cols == 0, std::string(what) + ": data is null");
  m.data = static_cast<char*>(t->data) + t->byte_offset;
  return m;
}

/// The arguments of one forward call, validated against the layer.
struct ForwardArgs {
  Matrix x;             ///< [M, K]
  Matrix y;             ///< [M, N] (MoE: [M, K]), same dtype as x
  Matrix topk_ids;      ///< MoE: [M, top_k] int32/int64
  Matrix topk_weights;  ///< MoE: [M, top_k] f32/f16/bf16
  int64_t M = 0;
};

/// Scratch and threads for one forward call.
struct Exec {
  void* workspace = nullptr;
  size_t workspace_size = 0;
  int num_threads = 1;
};

/// A prepared (repacked) weight. Immutable after construction: forward is const and may run
/// concurrently.
class Prepared {
 public:
  virtual ~Prepared() = default;
  /// Bytes this prepared weight holds.
  virtual size_t bytes() const = 0;
  /// Workspace bytes a forward with M rows needs.
  virtual size_t workspace_bytes(int64_t /*M*/) const { return 0; }
  /// Compute y from x (and the routing for MoE).
  virtual void forward(const ForwardArgs& args, const Exec& exec) const = 0;

  /// The layer this weight was prepared for (copied at prepare; `desc().name` is valid).
  const nibble_layer_desc& desc() const { return desc_; }
  /// Remember the layer (called by the C++ layer after prepare).
  void set_desc(const nibble_layer_desc& d) {
    name_ = d.name ? d.name : "";
    desc_ = nibble_layer_desc{};
    std::memcpy(&desc_, &d, std::min<size_t>(d.struct_size, sizeof desc_));
    desc_.struct_size = sizeof desc_;
    desc_.name = name_.c_str();
  }

 private:
  nibble_layer_desc desc_{};
  std::string name_;
};

/// What a kernel declares about itself.
struct KernelInfo {
  std::string name;
  nibble_op op = NIBBLE_OP_LINEAR;
  int priority = 0;
  nibble_numeric_mode mode = NIBBLE_MODE_WEIGHT_ONLY;
  double bound_f32 = 0;
  double bound_f16 = 0;
  double bound_bf16 = 0;
};

/// A kernel: says what it can implement and prepares weights for it.
class Kernel {
 public:
  virtual ~Kernel() = default;
  /// Name, op, priority, numeric mode and error bounds.
  virtual KernelInfo info() const = 0;
  /// Empty if this kernel computes `desc` correctly, else the reason it cannot.
  virtual std::string why_not(const nibble_layer_desc& desc) const = 0;
  /// Repack the weight (desc.op says which member of `weight` is set).
  virtual std::unique_ptr<Prepared> prepare(const nibble_layer_desc& desc,
                                            const nibble_weight_input& weight) const = 0;
};

/// The probe's answer.
struct Probe {
  bool available = false;
  uint32_t reasons = 0;
  std::string detail;
};

namespace detail {

struct KernelSlot {
  nibble_kernel c;  // first member: a nibble_kernel* is a KernelSlot*
  std::unique_ptr<Kernel> kernel;
  std::string name;
};

inline const Kernel& kernel_of(const nibble_kernel* self) {
  return *reinterpret_cast<const KernelSlot*>(self)->kernel;
}
inline const Prepared& prepared_of(const nibble_prepared* p) {
  return *reinterpret_cast<const Prepared*>(p);
}

// Run f, turning every exception into a status and a message.
template <class F>
nibble_status guarded(nibble_error* error, F&& f) {
  try {
    f();
    return NIBBLE_OK;
  } catch (const Error& e) {
    write_error(error, e.what());
    return e.status();
  } catch (const std::bad_alloc&) {
    write_error(error, "out of memory");
    return NIBBLE_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    write_error(error, std::string("internal error: ") + e.what());
    return NIBBLE_INTERNAL;
  } catch (...) {
    write_error(error, "internal error: unknown exception");
    return NIBBLE_INTERNAL;
  }
}

inline ForwardArgs validate(const nibble_layer_desc& d, const nibble_forward_args* a) {
  require(a != nullptr, "forward arguments are missing");
  ForwardArgs f;
  f.x = as_matrix(a->x, "x");
  f.y = as_matrix(a->y, "y");
  const int64_t out_cols = d.op == NIBBLE_OP_MOE ? d.K : d.N;
  require(is_float_dtype(f.x.dtype),
          "x: dtype " + dtype_name(f.x.dtype) + " is not one of f32, f16, bf16");
  require(same_dtype(f.x.dtype, f.y.dtype),
          "y: dtype " + dtype_name(f.y.dtype) + " differs from x's " + dtype_name(f.x.dtype));
  require(f.x.cols == d.K,
          "x: expected " + std::to_string(d.K) + " columns (K), got " + std::to_string(f.x.cols));
  require(f.y.cols == out_cols,
          "y: expected " + std::to_string(out_cols) + " columns, got " + std::to_string(f.y.cols));
  require(f.y.rows == f.x.rows, "y: expected " + std::to_string(f.x.rows) + " rows (as x), got " +
                                    std::to_string(f.y.rows));
  f.M = f.x.rows;
  if (d.op == NIBBLE_OP_MOE) {
    f.topk_ids = as_matrix(a->topk_ids, "topk_ids");
    f.topk_weights = as_matrix(a->topk_weights, "topk_weights");
    require(f.topk_ids.dtype.code == kDLInt &&
                (f.topk_ids.dtype.bits == 32 || f.topk_ids.dtype.bits == 64),
            "topk_ids: dtype " + dtype_name(f.topk_ids.dtype) + " is not int32 or int64");
    require(is_float_dtype(f.topk_weights.dtype), "topk_weights: dtype " +
                                                      dtype_name(f.topk_weights.dtype) +
                                                      " is not one of f32, f16, bf16");
    for (const Matrix* m : {&f.topk_ids, &f.topk_weights}) {
      require(m->rows == f.M && m->cols == d.top_k,
              std::string(m == &f.topk_ids ? "topk_ids" : "topk_weights") + ": expected [" +
                  std::to_string(f.M) + ", " + std::to_string(d.top_k) + "], got [" +
                  std::to_string(m->rows) + ", " + std::to_string(m->cols) + "]");
    }
    for (int64_t m = 0; m < f.M; ++m)
      for (int64_t j = 0; j < d.top_k; ++j) {
        int64_t e = f.topk_ids.get_int(m, j);
        require(e >= -1 && e < d.num_experts,
                "topk_ids[" + std::to_string(m) + ", " + std::to_string(j) +
                    "] = " + std::to_string(e) + " is outside [0, " +
                    std::to_string(d.num_experts) + ") (or -1 for no expert)");
      }
  }
  return f;
}

inline int32_t c_can_implement(const nibble_kernel* self, const nibble_layer_desc* desc,
                               nibble_error* reason) {
  std::string why;
  nibble_status s = guarded(reason, [&] {
    require(desc != nullptr, "layer descriptor is missing");
    why = kernel_of(self).why_not(*desc);
  });
  if (s != NIBBLE_OK) return 0;
  if (!why.empty()) {
    write_error(reason, why);
    return 0;
  }
  return 1;
}

inline nibble_status c_workspace_bytes(const nibble_kernel*, const nibble_prepared* p, int64_t M,
                                       size_t* bytes, nibble_error* error) {
  return guarded(error, [&] {
    require(p != nullptr && bytes != nullptr, "workspace_bytes: null argument");
    require(M >= 0, "workspace_bytes: M is negative");
    *bytes = prepared_of(p).workspace_bytes(M);
  });
}

inline nibble_status c_prepare(const nibble_kernel* self, const nibble_layer_desc* desc,
                               const nibble_weight_input* weight, nibble_prepared** out,
                               nibble_error* error) {
  return guarded(error, [&] {
    require(desc != nullptr && weight != nullptr && out != nullptr, "prepare: null argument");
    *out = nullptr;
    const Kernel& k = kernel_of(self);
    std::string why = k.why_not(*desc);
    if (!why.empty()) throw Error(NIBBLE_UNSUPPORTED, why);
    switch (desc->op) {
      case NIBBLE_OP_LINEAR:
        require(weight->quantized != nullptr, "prepare: the quantized weight is missing");
        break;
      case NIBBLE_OP_DENSE:
        require(weight->dense != nullptr, "prepare: the dense weight is missing");
        break;
      case NIBBLE_OP_MOE:
        require(weight->experts != nullptr, "prepare: the experts are missing");
        break;
      default:
        throw Error(NIBBLE_INVALID_ARGUMENT, "prepare: unknown op " + std::to_string(desc->op));
    }
    std::unique_ptr<Prepared> p = k.prepare(*desc, *weight);
    if (!p) throw Error(NIBBLE_INTERNAL, "prepare returned nothing");
    p->set_desc(*desc);
    *out = reinterpret_cast<nibble_prepared*>(p.release());
  });
}

inline nibble_status c_forward(const nibble_kernel*, const nibble_prepared* p,
                               const nibble_forward_args* args, const nibble_exec* exec,
                               nibble_error* error) {
  return guarded(error, [&] {
    require(p != nullptr, "forward: the prepared weight is null");
    const Prepared& prep = prepared_of(p);
    ForwardArgs f = validate(prep.desc(), args);
    Exec e;
    if (exec) {
      e.workspace = exec->workspace;
      e.workspace_size = exec->workspace_size;
      e.num_threads = std::max(1, int(exec->num_threads));
    }
    size_t need = prep.workspace_bytes(f.M);
    require(e.workspace_size >= need, "forward: workspace of " + std::to_string(e.workspace_size) +
                                          " bytes, need " + std::to_string(need));
    if (f.M == 0) return;
    prep.forward(f, e);
  });
}

inline void c_release(const nibble_kernel*, nibble_prepared* p) {
  delete reinterpret_cast<Prepared*>(p);
}

#if NIBBLE_ABI_MINOR >= 1
inline size_t c_prepared_bytes(const nibble_kernel*, const nibble_prepared* p) {
  try {
    return p ? prepared_of(p).bytes() : 0;
  } catch (...) {
    return 0;
  }
}
#endif

template <class B>
struct PluginState {
  std::unique_ptr<B> backend;
  std::vector<std::unique_ptr<KernelSlot>> slots;
  std::vector<const nibble_kernel*> table;
  Probe probe;
};

// Never destroyed: the host may call shutdown from its exit handlers, after this library's static
// destructors would have run.
template <class B>
PluginState<B>& plugin_state() {
  static PluginState<B>* s = new PluginState<B>;
  return *s;
}

template <class B>
nibble_status c_probe(nibble_probe_result* r) {
  return guarded(nullptr, [&] {
    if (!r || r->struct_size < offsetof(nibble_probe_result, detail)) return;
    Probe p = plugin_state<B>().backend->probe();
    nibble_probe_result full{};
    full.struct_size = uint32_t(std::min<size_t>(r->struct_size, sizeof full));
    full.available = p.available ? 1 : 0;
    full.reasons = p.reasons;
    size_t cap = std::min<size_t>(NIBBLE_PROBE_DETAIL_CAPACITY,
                                  full.struct_size - offsetof(nibble_probe_result, detail));
    size_t n = std::min(p.detail.size(), cap ? cap - 1 : 0);
    std::memcpy(full.detail, p.detail.data(), n);
    full.detail[n] = '\0';
    std::memcpy(r, &full, full.struct_size);
  });
}

template <class B>
void c_shutdown() {
  try {
    auto& s = plugin_state<B>();
    if (s.backend) s.backend->shutdown();
  } catch (...) {
  }
}

template <class B>
nibble_status entry(const nibble_host* host, nibble_plugin* out, nibble_error* error) {
  return guarded(error, [&] {
    require(out != nullptr && out->struct_size >= offsetof(nibble_plugin, name),
            "entry: the plugin descriptor is missing or too small");
    Host::set(host, B::name);
    auto& s = plugin_state<B>();
    if (!s.backend) {
      s.backend = std::make_unique<B>();
      for (auto& k : s.backend->make_kernels()) {
        auto slot = std::make_unique<KernelSlot>();
        KernelInfo info = k->info();
        slot->name = info.name;
        slot->kernel = std::move(k);
        nibble_kernel& c = slot->c;
        c = nibble_kernel{};
        c.struct_size = sizeof(nibble_kernel);
        c.name = slot->name.c_str();
        c.op = info.op;
        c.priority = info.priority;
        c.numeric_mode = info.mode;
        c.error_bound_f32 = info.bound_f32;
        c.error_bound_f16 = info.bound_f16;
        c.error_bound_bf16 = info.bound_bf16;
        c.can_implement = &c_can_implement;
        c.workspace_bytes = &c_workspace_bytes;
        c.prepare = &c_prepare;
        c.forward = &c_forward;
        c.release = &c_release;
#if NIBBLE_ABI_MINOR >= 1
        c.prepared_bytes = &c_prepared_bytes;
#endif
        s.table.push_back(&slot->c);
        s.slots.push_back(std::move(slot));
      }
    }
    nibble_plugin full{};
    full.abi_major = NIBBLE_ABI_MAJOR;
    full.abi_minor = NIBBLE_ABI_MINOR;
    full.name = B::name;
    full.version = B::version;
    full.vendor = B::vendor;
    full.description = B::description;
    full.probe = &c_probe<B>;
    full.kernel_count = uint32_t(s.table.size());
    full.kernels = s.table.data();
    full.shutdown = &c_shutdown<B>;
    full.struct_size = uint32_t(std::min<size_t>(out->struct_size, sizeof full));
    std::memcpy(out, &full, full.struct_size);
  });
}

}  // namespace detail

/// Base class of a backend. Derive, give it static `name`, `version`, `vendor`, `description`
/// (const char*), override what you need, and pass it to NIBBLE_PLUGIN.
class Backend {
 public:
  virtual ~Backend() = default;
  /// Is the backend usable here? Must not start threads.
  virtual Probe probe() { return Probe{true, 0, ""}; }
  /// The kernels this backend offers (called once, at the entry point).
  virtual std::vector<std::unique_ptr<Kernel>> make_kernels() = 0;
  /// Join every thread the backend started.
  virtual void shutdown() {}
};

}  // namespace nibble::sdk

/// Define the plugin's single exported entry point for backend class `BackendClass`.
#define NIBBLE_PLUGIN(BackendClass)                                       \
  extern "C" NIBBLE_EXPORT nibble_status nibble_plugin_entry(             \
      const nibble_host* host, nibble_plugin* out, nibble_error* error) { \
    return ::nibble::sdk::detail::entry<BackendClass>(host, out, error);  \
  }
