// The device memory a device backend offers its hosts (ABI 1.3, nibble_device_memory), as a C++
// interface: a host links no device runtime, so it moves activations and outputs through these
// calls. A Backend whose kernels run on a device returns one from device_memory(); the C glue
// (glue.hpp) turns it into the load's nibble_device_memory table, makes the load's host current
// around every call and turns exceptions into statuses.
#pragma once

#include <nibble/sdk/plugin.h>
#include <nibble/sdk/plugin/error.hpp>

#include <cstddef>
#include <cstdint>

namespace nibble::sdk {

/// The directions of DeviceMemory::copy (nibble_device_memory's NIBBLE_COPY_*).
enum class CopyDirection : int32_t {
  host_to_device = NIBBLE_COPY_HOST_TO_DEVICE,
  device_to_host = NIBBLE_COPY_DEVICE_TO_HOST,
  device_to_device = NIBBLE_COPY_DEVICE_TO_DEVICE,
};

/// Device memory of one load. Every call may throw PluginError (OUT_OF_MEMORY, INVALID_ARGUMENT,
/// UNAVAILABLE, ...) except free; calls may come from several threads at once.
class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  /// The DLDeviceType these calls manage (the device_type of the backend's device kernels).
  virtual int32_t device_type() const = 0;
  /// Devices of that type this machine has (0 when none).
  virtual int device_count() = 0;
  /// `bytes` (> 0) of memory on device `device_id`, aligned for any dtype.
  virtual void* alloc(int device_id, size_t bytes) = 0;
  /// Free memory alloc returned on `device_id` (nullptr: nothing). Must not throw.
  virtual void free(int device_id, void* ptr) noexcept = 0;
  /// Queue a copy of `bytes` on `stream` (nullptr: the default stream); it completes when
  /// synchronize(device_id, stream) returns.
  virtual void copy(int device_id, void* dst, const void* src, size_t bytes,
                    CopyDirection direction, void* stream) = 0;
  /// Wait until everything queued on `stream` of `device_id` has completed.
  virtual void synchronize(int device_id, void* stream) = 0;

  // Events: the device's own clock for queued work (optional). A backend that overrides
  // has_events to say true overrides the four calls below; the glue offers them to hosts only then.
  /// Whether this memory's devices time queued work with events.
  virtual bool has_events() const { return false; }
  /// A new event on `device_id`, not yet recorded.
  virtual void* event_create(int device_id);
  /// Free an event from event_create (its recordings may still be pending). Must not throw.
  virtual void event_destroy(int device_id, void* event) noexcept;
  /// Queue `event` on `stream` (nullptr: the default stream): it takes its time when the work
  /// queued before it on that stream has completed.
  virtual void event_record(int device_id, void* event, void* stream);
  /// Wait for `end`, then the seconds from `start` to `end` (both recorded; throw
  /// PluginError(INVALID_ARGUMENT) for one never recorded).
  virtual double event_elapsed(int device_id, void* start, void* end);
};

inline void* DeviceMemory::event_create(int) {
  throw PluginError(NIBBLE_UNSUPPORTED, "this device memory has no events");
}
inline void DeviceMemory::event_destroy(int, void*) noexcept {}
inline void DeviceMemory::event_record(int, void*, void*) {
  throw PluginError(NIBBLE_UNSUPPORTED, "this device memory has no events");
}
inline double DeviceMemory::event_elapsed(int, void*, void*) {
  throw PluginError(NIBBLE_UNSUPPORTED, "this device memory has no events");
}

}  // namespace nibble::sdk
