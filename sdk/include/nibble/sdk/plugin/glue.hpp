// The C glue: the ABI's tables generated from a Backend class, struct sizes stamped, tensors
// checked, every exception turned into a status, and the host services of the right load made
// current around every call (host_services.hpp).
//
// Loads. Every entry call from a host whose plugin descriptor has room for `plugin_context`
// (ABI 1.2) makes a new load: a Backend instance, its kernels and their table, and the host table
// it was given; the host gets the load as plugin_context and ends it with shutdown2, which frees
// it. A host without that room (before 1.2) cannot tell loads apart, so its entry calls share
// one load, made at the first call and never freed (such a host calls shutdown from its exit
// handlers, after this library's static destructors may have run). The contextless probe and
// shutdown act on the process's first load, whichever host made it.
//
// Devices (ABI 1.3). A kernel's KernelInfo::device_type becomes nibble_kernel.device_type, and the
// Backend's DeviceMemory becomes the load's nibble_device_memory table. A host older than 1.3
// cannot see either (it would hand host pointers to a device kernel), so its entry calls list
// only the CPU kernels. A layer on another device than the kernel's is refused with a reason in
// can_implement (and prepare), and forward's tensors are checked against the kernel's device.
#pragma once

#include <nibble/sdk/plugin.h>
#include <nibble/sdk/device.hpp>
#include <nibble/sdk/plugin/device_memory.hpp>
#include <nibble/sdk/plugin/error.hpp>
#include <nibble/sdk/plugin/host_services.hpp>
#include <nibble/sdk/plugin/kernel.hpp>
#include <nibble/sdk/plugin/tensor_checks.hpp>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

// NIBBLE_PLUGIN_EXPORT's older name, kept for the plugins that use it.
#define NIBBLE_EXPORT NIBBLE_PLUGIN_EXPORT

namespace nibble::sdk::detail {

// One kernel of one load. The nibble_kernel is the first member: a nibble_kernel* is a
// KernelSlot*, so every kernel call finds its load's host through `self`.
struct KernelSlot {
  nibble_kernel c;
  std::unique_ptr<Kernel> kernel;
  std::string name;
  const nibble_host* host = nullptr;
  const char* plugin = "";
  int32_t device_type = kDLCPU;
};

inline const KernelSlot& slot_of(const nibble_kernel* self) {
  return *reinterpret_cast<const KernelSlot*>(self);
}
inline const Prepared& prepared_of(const nibble_prepared* p) {
  return *reinterpret_cast<const Prepared*>(p);
}

// Run f with the load of kernel `self` as this thread's host, turning exceptions into a status.
template <class F>
nibble_status kernel_call(const nibble_kernel* self, nibble_error* error, F&& f) {
  const KernelSlot& slot = slot_of(self);
  Host::Scope scope(slot.host, slot.plugin);
  return guarded(error, std::forward<F>(f));
}

// Why kernel `slot` cannot take a layer on `desc`'s device ("" when it can).
inline std::string why_not_device(const KernelSlot& slot, const nibble_layer_desc& desc) {
  const DLDevice layer = layer_device(desc);
  if (normal_device_type(layer.device_type) == slot.device_type) return "";
  return slot.name + " runs on " + device_type_name(slot.device_type) + ", the layer is on " +
         device_name(layer);
}

inline int32_t c_can_implement(const nibble_kernel* self, const nibble_layer_desc* desc,
                               nibble_error* reason) {
  std::string why;
  nibble_status s = kernel_call(self, reason, [&] {
    require(desc != nullptr, "layer descriptor is missing");
    why = why_not_device(slot_of(self), *desc);
    if (why.empty()) why = slot_of(self).kernel->why_not(*desc);
  });
  if (s != NIBBLE_OK) return 0;
  if (!why.empty()) {
    write_error(reason, why);
    return 0;
  }
  return 1;
}

inline nibble_status c_workspace_bytes(const nibble_kernel* self, const nibble_prepared* p,
                                       int64_t M, size_t* bytes, nibble_error* error) {
  return kernel_call(self, error, [&] {
    require(p != nullptr && bytes != nullptr, "workspace_bytes: null argument");
    require(M >= 0, "workspace_bytes: M is negative");
    *bytes = prepared_of(p).workspace_bytes(M);
  });
}

inline nibble_status c_prepare(const nibble_kernel* self, const nibble_layer_desc* desc,
                               const nibble_weight_input* weight, nibble_prepared** out,
                               nibble_error* error) {
  return kernel_call(self, error, [&] {
    require(desc != nullptr && weight != nullptr && out != nullptr, "prepare: null argument");
    *out = nullptr;
    const Kernel& k = *slot_of(self).kernel;
    std::string why = why_not_device(slot_of(self), *desc);
    if (why.empty()) why = k.why_not(*desc);
    if (!why.empty()) throw PluginError(NIBBLE_UNSUPPORTED, why);
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
        throw PluginError(NIBBLE_INVALID_ARGUMENT,
                          "prepare: unknown op " + std::to_string(desc->op));
    }
    std::unique_ptr<Prepared> p = k.prepare(*desc, *weight);
    if (!p) throw PluginError(NIBBLE_INTERNAL, "prepare returned nothing");
    p->set_desc(*desc);
    *out = reinterpret_cast<nibble_prepared*>(p.release());
  });
}

inline nibble_status c_forward(const nibble_kernel* self, const nibble_prepared* p,
                               const nibble_forward_args* args, const nibble_exec* exec,
                               nibble_error* error) {
  return kernel_call(self, error, [&] {
    if (p == nullptr) detail::reject("forward: the prepared weight is null");
    const Prepared& prep = prepared_of(p);
    ForwardArgs f = check_forward_args(prep.desc(), args, slot_of(self).device_type);
    Exec e;
    if (exec) {
      e.workspace = exec->workspace;
      e.workspace_size = exec->workspace_size;
      e.num_threads = std::max(1, int(exec->num_threads));
#if NIBBLE_ABI_MINOR >= 3
      if (has_field(exec->struct_size, offsetof(nibble_exec, stream), sizeof(void*)))
        e.stream = exec->stream;
#endif
    }
    size_t need = prep.workspace_bytes(f.M);
    if (e.workspace_size < need)
      detail::reject("forward: workspace of " + std::to_string(e.workspace_size) + " bytes, need " +
                     std::to_string(need));
    if (f.M == 0) return;
    prep.forward(f, e);
  });
}

inline void c_release(const nibble_kernel* self, nibble_prepared* p) {
  const KernelSlot& slot = slot_of(self);
  Host::Scope scope(slot.host, slot.plugin);
  delete reinterpret_cast<Prepared*>(p);
}

#if NIBBLE_ABI_MINOR >= 1
inline size_t c_prepared_bytes(const nibble_kernel* self, const nibble_prepared* p) {
  size_t bytes = 0;
  kernel_call(self, nullptr, [&] { bytes = p ? prepared_of(p).bytes() : 0; });
  return bytes;
}
#endif

// One load of backend B: its instance, its kernels, the host table its entry call was given, and
// its device memory (when a kernel runs on a device).
template <class B>
struct Load {
  const nibble_host* host = nullptr;
  std::unique_ptr<B> backend;
  std::vector<std::unique_ptr<KernelSlot>> slots;
  std::vector<const nibble_kernel*> table;      // every kernel, for a host of ABI 1.3 or later
  std::vector<const nibble_kernel*> cpu_table;  // the CPU kernels, for an older host
  DeviceMemory* memory = nullptr;
#if NIBBLE_ABI_MINOR >= 3
  nibble_device_memory memory_table{};
#endif
};

#if NIBBLE_ABI_MINOR >= 3
// The C face of a load's DeviceMemory; plugin_context is the load.
template <class B>
Load<B>& load_of(void* plugin_context) {
  if (!plugin_context) throw PluginError(NIBBLE_INVALID_ARGUMENT, "device memory: no load");
  return *static_cast<Load<B>*>(plugin_context);
}

template <class B>
int32_t c_device_count(void* plugin_context) {
  int32_t count = 0;
  Host::Scope scope(plugin_context ? load_of<B>(plugin_context).host : nullptr, B::name);
  guarded(nullptr, [&] { count = std::max(0, load_of<B>(plugin_context).memory->device_count()); });
  return count;
}

template <class B>
nibble_status c_device_alloc(void* plugin_context, int32_t device_id, size_t bytes, void** out,
                             nibble_error* error) {
  Host::Scope scope(plugin_context ? load_of<B>(plugin_context).host : nullptr, B::name);
  return guarded(error, [&] {
    require(out != nullptr, "device memory alloc: the output pointer is null");
    *out = nullptr;
    require(bytes > 0, "device memory alloc: 0 bytes asked for");
    *out = load_of<B>(plugin_context).memory->alloc(device_id, bytes);
    if (!*out) throw PluginError(NIBBLE_OUT_OF_MEMORY, "device memory alloc returned nothing");
  });
}

template <class B>
void c_device_free(void* plugin_context, int32_t device_id, void* ptr) {
  if (!ptr) return;
  Host::Scope scope(plugin_context ? load_of<B>(plugin_context).host : nullptr, B::name);
  guarded(nullptr, [&] { load_of<B>(plugin_context).memory->free(device_id, ptr); });
}

template <class B>
nibble_status c_device_copy(void* plugin_context, int32_t device_id, void* dst, const void* src,
                            size_t bytes, int32_t direction, void* stream, nibble_error* error) {
  Host::Scope scope(plugin_context ? load_of<B>(plugin_context).host : nullptr, B::name);
  return guarded(error, [&] {
    require(direction == NIBBLE_COPY_HOST_TO_DEVICE || direction == NIBBLE_COPY_DEVICE_TO_HOST ||
                direction == NIBBLE_COPY_DEVICE_TO_DEVICE,
            "device memory copy: unknown direction " + std::to_string(direction));
    if (bytes == 0) return;
    require(dst != nullptr && src != nullptr, "device memory copy: a null pointer");
    load_of<B>(plugin_context)
        .memory->copy(device_id, dst, src, bytes, CopyDirection(direction), stream);
  });
}

template <class B>
nibble_status c_device_synchronize(void* plugin_context, int32_t device_id, void* stream,
                                   nibble_error* error) {
  Host::Scope scope(plugin_context ? load_of<B>(plugin_context).host : nullptr, B::name);
  return guarded(error, [&] { load_of<B>(plugin_context).memory->synchronize(device_id, stream); });
}

template <class B>
nibble_status c_event_create(void* plugin_context, int32_t device_id, void** event,
                             nibble_error* error) {
  Host::Scope scope(plugin_context ? load_of<B>(plugin_context).host : nullptr, B::name);
  return guarded(error, [&] {
    require(event != nullptr, "device event create: the output pointer is null");
    *event = nullptr;
    *event = load_of<B>(plugin_context).memory->event_create(device_id);
    if (!*event) throw PluginError(NIBBLE_INTERNAL, "device event create returned no event");
  });
}

template <class B>
void c_event_destroy(void* plugin_context, int32_t device_id, void* event) {
  if (!event) return;
  Host::Scope scope(plugin_context ? load_of<B>(plugin_context).host : nullptr, B::name);
  guarded(nullptr, [&] { load_of<B>(plugin_context).memory->event_destroy(device_id, event); });
}

template <class B>
nibble_status c_event_record(void* plugin_context, int32_t device_id, void* event, void* stream,
                             nibble_error* error) {
  Host::Scope scope(plugin_context ? load_of<B>(plugin_context).host : nullptr, B::name);
  return guarded(error, [&] {
    require(event != nullptr, "device event record: no event");
    load_of<B>(plugin_context).memory->event_record(device_id, event, stream);
  });
}

template <class B>
nibble_status c_event_elapsed(void* plugin_context, int32_t device_id, void* start, void* end,
                              double* seconds, nibble_error* error) {
  Host::Scope scope(plugin_context ? load_of<B>(plugin_context).host : nullptr, B::name);
  return guarded(error, [&] {
    require(seconds != nullptr, "device event elapsed: the output pointer is null");
    require(start != nullptr && end != nullptr, "device event elapsed: no event");
    *seconds = load_of<B>(plugin_context).memory->event_elapsed(device_id, start, end);
  });
}
#endif

// The process's first load: what the contextless probe and shutdown act on. A plain atomic
// pointer, so nothing here is destroyed at exit.
template <class B>
std::atomic<Load<B>*>& first_load() {
  static std::atomic<Load<B>*> load{nullptr};
  return load;
}

template <class B>
std::unique_ptr<Load<B>> make_load(const nibble_host* host) {
  auto load = std::make_unique<Load<B>>();
  load->host = host;
  load->backend = std::make_unique<B>();
  for (auto& k : load->backend->make_kernels()) {
    auto slot = std::make_unique<KernelSlot>();
    KernelInfo info = k->info();
    slot->name = info.name;
    slot->kernel = std::move(k);
    slot->host = host;
    slot->plugin = B::name;
    slot->device_type = normal_device_type(info.device_type);
#if NIBBLE_ABI_MINOR < 3
    if (slot->device_type != kDLCPU)
      throw PluginError(NIBBLE_INTERNAL, "kernel " + slot->name + " runs on " +
                                             device_type_name(slot->device_type) +
                                             ", which needs ABI 1.3 or later (NIBBLE_ABI_MINOR)");
#endif
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
#if NIBBLE_ABI_MINOR >= 3
    c.device_type = slot->device_type;
#endif
    load->table.push_back(&slot->c);
    if (slot->device_type == kDLCPU) load->cpu_table.push_back(&slot->c);
    load->slots.push_back(std::move(slot));
  }
  load->memory = load->backend->device_memory();
  for (const auto& slot : load->slots)
    if (slot->device_type != kDLCPU &&
        (!load->memory || normal_device_type(load->memory->device_type()) != slot->device_type))
      throw PluginError(NIBBLE_INTERNAL, "kernel " + slot->name + " runs on " +
                                             device_type_name(slot->device_type) +
                                             ", but the backend gives no device memory of that "
                                             "type (Backend::device_memory)");
#if NIBBLE_ABI_MINOR >= 3
  if (load->memory) {
    nibble_device_memory& m = load->memory_table;
    m.struct_size = sizeof m;
    m.device_type = normal_device_type(load->memory->device_type());
    m.device_count = &c_device_count<B>;
    m.alloc = &c_device_alloc<B>;
    m.free = &c_device_free<B>;
    m.copy = &c_device_copy<B>;
    m.synchronize = &c_device_synchronize<B>;
    if (load->memory->has_events()) {
      m.event_create = &c_event_create<B>;
      m.event_destroy = &c_event_destroy<B>;
      m.event_record = &c_event_record<B>;
      m.event_elapsed = &c_event_elapsed<B>;
    }
  }
#endif
  return load;
}

template <class B>
nibble_status probe_load(Load<B>* load, nibble_probe_result* r) {
  if (!load) return NIBBLE_INTERNAL;  // no entry call yet (or its load has ended)
  Host::Scope scope(load->host, B::name);
  return guarded(nullptr, [&] {
    if (!r || r->struct_size < offsetof(nibble_probe_result, detail)) return;
    Probe p = load->backend->probe();
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
void shutdown_load(Load<B>* load) {
  if (!load) return;
  Host::Scope scope(load->host, B::name);
  guarded(nullptr, [&] { load->backend->shutdown(); });
}

template <class B>
nibble_status c_probe(nibble_probe_result* r) {
  return probe_load(first_load<B>().load(), r);
}

template <class B>
void c_shutdown() {
  shutdown_load(first_load<B>().load());
}

#if NIBBLE_ABI_MINOR >= 2
template <class B>
nibble_status c_probe2(void* plugin_context, nibble_probe_result* r) {
  return probe_load(static_cast<Load<B>*>(plugin_context), r);
}

template <class B>
void c_shutdown2(void* plugin_context) {
  auto* load = static_cast<Load<B>*>(plugin_context);
  shutdown_load(load);
  Load<B>* expected = load;
  first_load<B>().compare_exchange_strong(expected, nullptr);
  delete load;
}
#endif

// Whether a host that gave a descriptor of `capacity` bytes receives a plugin context.
constexpr bool takes_plugin_context(uint32_t capacity) {
#if NIBBLE_ABI_MINOR >= 2
  return has_field(capacity, offsetof(nibble_plugin, shutdown2), sizeof(void*));
#else
  (void)capacity;
  return false;
#endif
}

// The load this entry call answers with: a new one for a host that takes a context, else the
// process's first load (made now if this is the first call).
template <class B>
Load<B>* load_for_entry(const nibble_host* host, uint32_t capacity) {
  std::atomic<Load<B>*>& first = first_load<B>();
  if (!takes_plugin_context(capacity)) {
    if (Load<B>* shared = first.load()) {
      shared->host = host;
      for (auto& slot : shared->slots) slot->host = host;
      return shared;
    }
  }
  Load<B>* load = make_load<B>(host).release();
  Load<B>* none = nullptr;
  first.compare_exchange_strong(none, load);
  return load;
}

template <class B>
nibble_status entry(const nibble_host* host, nibble_plugin* out, nibble_error* error) {
  Host::Scope scope(host, B::name);
  return guarded(error, [&] {
    require(out != nullptr && out->struct_size >= offsetof(nibble_plugin, name),
            "entry: the plugin descriptor is missing or too small");
    Load<B>* load = load_for_entry<B>(host, out->struct_size);
    // Only a host of 1.3 or later knows kernels run anywhere but on the CPU.
    const bool host_knows_devices = host && host->abi_minor >= 3;
    const std::vector<const nibble_kernel*>& kernels =
        host_knows_devices ? load->table : load->cpu_table;
    nibble_plugin full{};
    full.abi_major = NIBBLE_ABI_MAJOR;
    full.abi_minor = NIBBLE_ABI_MINOR;
    full.name = B::name;
    full.version = B::version;
    full.vendor = B::vendor;
    full.description = B::description;
    full.probe = &c_probe<B>;
    full.kernel_count = uint32_t(kernels.size());
    full.kernels = kernels.data();
    full.shutdown = &c_shutdown<B>;
#if NIBBLE_ABI_MINOR >= 2
    full.plugin_context = load;
    full.probe2 = &c_probe2<B>;
    full.shutdown2 = &c_shutdown2<B>;
#endif
#if NIBBLE_ABI_MINOR >= 3
    full.device_memory = host_knows_devices && load->memory ? &load->memory_table : nullptr;
#endif
    full.struct_size = uint32_t(std::min<size_t>(out->struct_size, sizeof full));
    std::memcpy(out, &full, full.struct_size);
  });
}

}  // namespace nibble::sdk::detail

/// Define the plugin's single exported entry point for backend class `BackendClass`.
#define NIBBLE_PLUGIN(BackendClass)                                       \
  extern "C" NIBBLE_EXPORT nibble_status nibble_plugin_entry(             \
      const nibble_host* host, nibble_plugin* out, nibble_error* error) { \
    return ::nibble::sdk::detail::entry<BackendClass>(host, out, error);  \
  }
