// The device memory a device backend offers its hosts (ABI 1.3, nibble_device_memory), as a C++
// interface: a host links no device runtime, so it moves activations and outputs through these
// calls. A Backend whose kernels run on a device returns one from device_memory(); the C glue
// (glue.hpp) turns it into the load's nibble_device_memory table, makes the load's host current
// around every call and turns exceptions into statuses.
#pragma once

#include <nibble/sdk/plugin.h>

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
};

}  // namespace nibble::sdk
