// How the bench times a sample of a device backend's calls: with the device's own events where the
// plugin offers them (nibble_device_memory's event calls), else with the host's clock. Calls are
// queued back to back and waited for once, as a model's layers follow each other on a stream; the
// host's clock then also counts queueing the first call and waiting for the last, which the
// device's events do not.
#pragma once

#include "bench_common.hpp"

#include <nibble/sdk/host/device.hpp>

#include <chrono>
#include <cmath>
#include <limits>
#include <thread>

namespace nibble::bench {

/// One sample's seconds per call: `host` from before the first call until the device finished the
/// last (the host's clock), `device` on the device's events (NaN without them).
struct SampleSeconds {
  double host = 0;
  double device = std::numeric_limits<double>::quiet_NaN();
  /// The time a case reports: the device's where it was measured.
  double reported() const { return std::isnan(device) ? host : device; }
};

/// Two events of a device, reused by every sample of a run; empty where the device has none.
class DeviceClock {
 public:
  DeviceClock() = default;
  /// The clock of `device` (empty for host memory or a device without events).
  explicit DeviceClock(const sdk::host::Device& device) : device_(device) {
    if (device && device.has_events()) {
      first_ = device.event();
      last_ = device.event();
    }
  }
  /// Whether samples are timed on the device's events.
  explicit operator bool() const { return first_.get() != nullptr; }

  /// One timed sample of `calls` back-to-back calls of f on the default stream, after the quiet
  /// gap and one untimed call (as timed_sample). On the events, from the end of the first call to
  /// the end of the last, over calls − 1, so the device's idle wait for the first launch is not
  /// counted; a sample of one call is timed from before it to its end.
  template <class F>
  SampleSeconds sample(int calls, F&& f) const {
    std::this_thread::sleep_for(kQuietGap);
    if (calls > 1) {
      f();
      device_.synchronize(nullptr);
    }
    SampleSeconds s;
    const auto t0 = std::chrono::steady_clock::now();
    if (*this && calls == 1) first_.record(nullptr);
    for (int i = 0; i < calls; ++i) {
      f();
      if (*this && i == 0 && calls > 1) first_.record(nullptr);
    }
    if (*this) last_.record(nullptr);
    device_.synchronize(nullptr);
    s.host = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / calls;
    if (*this) s.device = device_.elapsed_seconds(first_, last_) / (calls > 1 ? calls - 1 : 1);
    return s;
  }

  /// How a device's samples are timed, with its events or without them.
  static const char* method(bool events) {
    return events ? "device events, from the end of a sample's first call to the end of its last"
                  : "host clock, from queueing a sample's first call to the end of its last";
  }
  /// How this clock times its samples.
  const char* method() const { return method(bool(*this)); }

 private:
  sdk::host::Device device_;
  sdk::host::DeviceEvent first_, last_;
};

}  // namespace nibble::bench
