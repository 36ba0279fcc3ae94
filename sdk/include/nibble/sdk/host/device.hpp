// The host side of devices (ABI 1.3): a plugin's device memory (nibble_device_memory) as a Device
// with RAII buffers, so a host that links no device library can allocate, fill and read back
// device tensors; which device a kernel runs on; the layer descriptor's device fields. Device and
// DeviceBuffer touch no struct whose layout depends on the ABI minor, so they sit outside the
// minor's namespace and one host API can hand them out to hosts of any minor; the functions that
// read minor-dependent structs answer "CPU" for a plugin (or a host build) older than 1.3.
// Header-only.
#pragma once

#include <nibble/sdk/plugin.h>
#include <nibble/sdk/device.hpp>
#include <nibble/sdk/host/abi_namespace.hpp>
#include <nibble/sdk/host/error.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

namespace nibble::sdk::host {

class DeviceBuffer;
class DeviceEvent;

/// One device of a loaded plugin: its nibble_device_memory bound to the load's plugin_context and
/// a device index. A small value; empty (operator bool false) for host memory. Calls throw
/// CallError with the plugin's status and message.
class Device {
 public:
  Device() = default;
  /// Device `device_id` of `memory`, a table of the load `plugin_context`.
  Device(const nibble_device_memory* memory, void* plugin_context, int32_t device_id)
      : memory_(memory), context_(plugin_context), id_(device_id) {}
  /// Whether this names a device (not host memory).
  explicit operator bool() const { return memory_ != nullptr; }
  /// The device as DLPack names it ({kDLCPU, 0} when empty).
  DLDevice dl_device() const {
    return memory_ ? DLDevice{DLDeviceType(normal_device_type(memory_->device_type)), id_}
                   : DLDevice{kDLCPU, 0};
  }
  /// Devices of this type the machine has (0 when empty).
  int32_t count() const {
    if (!memory_) return 0;
    const int32_t n = guard("device_count", [&] { return memory_->device_count(context_); });
    return n < 0 ? 0 : n;
  }
  /// `bytes` (> 0) of memory on this device, freed when the buffer goes.
  DeviceBuffer alloc(size_t bytes) const;
  /// Queue a copy of `bytes` on `stream` (nullptr: the default stream); `direction` is a
  /// NIBBLE_COPY_*. Host memory must stay valid until synchronize(stream) returns.
  void copy(void* dst, const void* src, size_t bytes, int32_t direction, void* stream) const {
    require_device("copy");
    ErrorBuffer err;
    call_checked("device copy", err, [&] {
      return memory_->copy(context_, id_, dst, src, bytes, direction, stream, err.get());
    });
  }
  /// Wait for everything queued on `stream` of this device.
  void synchronize(void* stream) const {
    require_device("synchronize");
    ErrorBuffer err;
    call_checked("device synchronize", err,
                 [&] { return memory_->synchronize(context_, id_, stream, err.get()); });
  }
  /// Free `ptr` from alloc on this device (the buffer's deleter).
  void free(void* ptr) const {
    if (memory_ && ptr) guard("device free", [&] { memory_->free(context_, id_, ptr); });
  }
  /// Whether this device times queued work with events (its table has all four event calls).
  bool has_events() const { return memory_ && events_in(*memory_) == 4; }
  /// A new event on this device, destroyed when the value goes; throws where !has_events().
  DeviceEvent event() const;
  /// Wait for `end`, then the seconds from `start` to `end`, both events of this device recorded.
  double elapsed_seconds(const DeviceEvent& start, const DeviceEvent& end) const;

  /// How many of the four event calls table `m` has (present within its struct_size, non-NULL).
  static int events_in(const nibble_device_memory& m) {
    if (m.struct_size < offsetof(nibble_device_memory, event_elapsed) + sizeof(void*)) return 0;
    return int(m.event_create != nullptr) + int(m.event_destroy != nullptr) +
           int(m.event_record != nullptr) + int(m.event_elapsed != nullptr);
  }

 private:
  void require_device(const char* call) const {
    if (!memory_)
      throw CallError(NIBBLE_INVALID_ARGUMENT, call, "host memory has no device to call");
  }
  friend class DeviceEvent;
  const nibble_device_memory* memory_ = nullptr;
  void* context_ = nullptr;
  int32_t id_ = 0;
};

/// An event of a Device (its clock for queued work), destroyed through the same load when the
/// value goes.
class DeviceEvent {
 public:
  DeviceEvent() = default;
  /// Own `event` from device.event_create.
  DeviceEvent(Device device, void* event) : device_(device), event_(event) {}
  DeviceEvent(DeviceEvent&& o) noexcept
      : device_(o.device_), event_(std::exchange(o.event_, nullptr)) {}
  DeviceEvent& operator=(DeviceEvent&& o) noexcept {
    if (this != &o) {
      reset();
      device_ = o.device_;
      event_ = std::exchange(o.event_, nullptr);
    }
    return *this;
  }
  DeviceEvent(const DeviceEvent&) = delete;
  DeviceEvent& operator=(const DeviceEvent&) = delete;
  ~DeviceEvent() { reset(); }

  /// The plugin's handle (nullptr when empty).
  void* get() const { return event_; }
  /// The device it belongs to.
  const Device& device() const { return device_; }
  /// Queue the event on `stream` (nullptr: the default stream) after the work queued there.
  void record(void* stream) const;
  /// Destroy the event now (exceptions escaping the plugin are dropped).
  void reset() noexcept;

 private:
  Device device_;
  void* event_ = nullptr;
};

/// Device memory from Device::alloc, freed (through the same load) when the buffer goes. Frees
/// without waiting: synchronize the stream that used it first.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  /// Own `ptr` of `bytes`, allocated on `device`.
  DeviceBuffer(Device device, void* ptr, size_t bytes)
      : device_(device), ptr_(ptr), bytes_(bytes) {}
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : device_(o.device_), ptr_(std::exchange(o.ptr_, nullptr)), bytes_(o.bytes_) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      device_ = o.device_;
      ptr_ = std::exchange(o.ptr_, nullptr);
      bytes_ = o.bytes_;
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { reset(); }

  /// The device address (nullptr when empty).
  void* get() const { return ptr_; }
  /// Its size in bytes.
  size_t size() const { return bytes_; }
  /// The device it lives on.
  const Device& device() const { return device_; }
  /// Queue a copy of `bytes` (at most size()) from host memory `src` into the buffer.
  void upload(const void* src, size_t bytes, void* stream) const {
    check_size(bytes, "upload");
    device_.copy(ptr_, src, bytes, NIBBLE_COPY_HOST_TO_DEVICE, stream);
  }
  /// Queue a copy of `bytes` (at most size()) from the buffer into host memory `dst`.
  void download(void* dst, size_t bytes, void* stream) const {
    check_size(bytes, "download");
    device_.copy(dst, ptr_, bytes, NIBBLE_COPY_DEVICE_TO_HOST, stream);
  }
  /// Free the memory now (exceptions escaping the plugin's free are dropped).
  void reset() {
    void* p = std::exchange(ptr_, nullptr);
    try {
      device_.free(p);
    } catch (...) {
    }
  }

 private:
  void check_size(size_t bytes, const char* call) const {
    if (bytes > bytes_)
      throw CallError(
          NIBBLE_INVALID_ARGUMENT, call,
          std::to_string(bytes) + " bytes do not fit a device buffer of " + std::to_string(bytes_));
  }
  Device device_;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

inline DeviceBuffer Device::alloc(size_t bytes) const {
  require_device("alloc");
  ErrorBuffer err;
  void* p = nullptr;
  call_checked("device alloc", err,
               [&] { return memory_->alloc(context_, id_, bytes, &p, err.get()); });
  if (!p)
    throw CallError(NIBBLE_INTERNAL, "device alloc", "alloc returned NIBBLE_OK but no memory");
  return DeviceBuffer(*this, p, bytes);
}

inline DeviceEvent Device::event() const {
  require_device("event_create");
  if (!has_events())
    throw CallError(NIBBLE_UNSUPPORTED, "device event create", "this device has no events");
  ErrorBuffer err;
  void* e = nullptr;
  call_checked("device event create", err,
               [&] { return memory_->event_create(context_, id_, &e, err.get()); });
  if (!e)
    throw CallError(NIBBLE_INTERNAL, "device event create",
                    "event_create returned NIBBLE_OK but no event");
  return DeviceEvent(*this, e);
}

inline double Device::elapsed_seconds(const DeviceEvent& start, const DeviceEvent& end) const {
  require_device("event_elapsed");
  if (!has_events())
    throw CallError(NIBBLE_UNSUPPORTED, "device event elapsed", "this device has no events");
  if (!start.get() || !end.get())
    throw CallError(NIBBLE_INVALID_ARGUMENT, "device event elapsed", "an empty event");
  ErrorBuffer err;
  double seconds = 0;
  call_checked("device event elapsed", err, [&] {
    return memory_->event_elapsed(context_, id_, start.get(), end.get(), &seconds, err.get());
  });
  return seconds;
}

inline void DeviceEvent::record(void* stream) const {
  if (!event_) throw CallError(NIBBLE_INVALID_ARGUMENT, "device event record", "an empty event");
  if (!device_.has_events())
    throw CallError(NIBBLE_UNSUPPORTED, "device event record", "this device has no events");
  const nibble_device_memory* m = device_.memory_;
  ErrorBuffer err;
  call_checked("device event record", err, [&] {
    return m->event_record(device_.context_, device_.id_, event_, stream, err.get());
  });
}

inline void DeviceEvent::reset() noexcept {
  void* e = std::exchange(event_, nullptr);
  if (!e || !device_.has_events()) return;
  try {
    const nibble_device_memory* m = device_.memory_;
    guard("device event destroy", [&] { m->event_destroy(device_.context_, device_.id_, e); });
  } catch (...) {
  }
}

inline namespace NIBBLE_SDK_HOST_ABI_NAMESPACE {

/// The DLDeviceType kernel `k`'s forward takes tensors on: kDLCPU for a kernel before 1.3 (its
/// struct ends before device_type) or one that left it 0.
inline int32_t kernel_device_type(const nibble_kernel* k) {
#if NIBBLE_ABI_MINOR >= 3
  if (k && k->struct_size >= offsetof(nibble_kernel, device_type) + sizeof(int32_t))
    return normal_device_type(k->device_type);
#else
  (void)k;
#endif
  return kDLCPU;
}

/// Whether kernel `k` runs on a device (not on host memory).
inline bool is_device_kernel(const nibble_kernel* k) { return kernel_device_type(k) != kDLCPU; }

/// Ask for layer `d` on `device` ({kDLCPU, 0}: host memory). A host before 1.3 has no such
/// fields: there every layer is on the CPU.
inline void set_layer_device(nibble_layer_desc& d, const DLDevice& device) {
#if NIBBLE_ABI_MINOR >= 3
  d.device_type = normal_device_type(device.device_type);
  d.device_id = device.device_id;
#else
  (void)d;
  (void)device;
#endif
}

/// The device layer descriptor `d` asks for ({kDLCPU, 0} when it predates 1.3).
inline DLDevice layer_device_of(const nibble_layer_desc& d) {
#if NIBBLE_ABI_MINOR >= 3
  if (d.struct_size >= offsetof(nibble_layer_desc, device_id) + sizeof(int32_t))
    return DLDevice{DLDeviceType(normal_device_type(d.device_type)), d.device_id};
#else
  (void)d;
#endif
  return DLDevice{kDLCPU, 0};
}

#if NIBBLE_ABI_MINOR >= 3

/// Why plugin descriptor `p`'s device memory table is unusable ("" when it is usable or absent).
inline std::string device_memory_problem(const nibble_plugin& p) {
  if (p.struct_size < offsetof(nibble_plugin, device_memory) + sizeof(void*) || !p.device_memory)
    return "";
  const nibble_device_memory& m = *p.device_memory;
  if (m.struct_size < offsetof(nibble_device_memory, synchronize) + sizeof(void*))
    return "its device memory table of " + std::to_string(m.struct_size) +
           " bytes is smaller than ABI 1.3's";
  if (normal_device_type(m.device_type) == kDLCPU)
    return "its device memory table manages host memory (device_type cpu)";
  const char* missing = !m.device_count  ? "device_count"
                        : !m.alloc       ? "alloc"
                        : !m.free        ? "free"
                        : !m.copy        ? "copy"
                        : !m.synchronize ? "synchronize"
                                         : nullptr;
  if (missing) return std::string("its device memory function '") + missing + "' is NULL";
  const int events = Device::events_in(m);
  if (events != 0 && events != 4)
    return "its device memory table has " + std::to_string(events) +
           " of the four event calls (event_create, event_destroy, event_record, event_elapsed): "
           "all or none";
  return "";
}

/// Plugin descriptor `p`'s device memory table, or nullptr when it has none (a CPU plugin, a plugin
/// before 1.3) or the table is unusable (device_memory_problem says why).
inline const nibble_device_memory* device_memory_of(const nibble_plugin& p) {
  if (p.struct_size < offsetof(nibble_plugin, device_memory) + sizeof(void*) || !p.device_memory)
    return nullptr;
  return device_memory_problem(p).empty() ? p.device_memory : nullptr;
}

/// Device `device_id` of the load plugin descriptor `p` describes (empty when `p` has no usable
/// device memory).
inline Device device_of(const nibble_plugin& p, int32_t device_id) {
  const nibble_device_memory* m = device_memory_of(p);
  return m ? Device(m, p.plugin_context, device_id) : Device();
}

#endif  // NIBBLE_ABI_MINOR >= 3

}  // namespace NIBBLE_SDK_HOST_ABI_NAMESPACE
}  // namespace nibble::sdk::host
