// x and y where a layer runs, for the commands that run layers on host tensors: the tensors
// themselves for a layer on the CPU, else copies on the layer's device made through its backend's
// device memory, with y read back by finish(). So `nibble run` and `nibble demo` work the same on
// every device.
#pragma once

#include <nibble/sdk/host/device_staging.hpp>

#include <optional>

namespace nibble::cli {

class LayerIo {
 public:
  /// Stage x and y on `device` (empty: the host; nothing is copied). Host x and y must outlive
  /// this object.
  LayerIo(const sdk::host::Device& device, const DLTensor& x, DLTensor& y)
      : device_(device), x_host_(&x), y_host_(&y) {
    if (!device_) return;
    x_on_.emplace(device_, x, nullptr);
    y_on_.emplace(device_, y, nullptr);
  }
  /// The x and y to pass to the layer (on its device).
  const DLTensor& x() { return x_on_ ? x_on_->tensor() : *x_host_; }
  DLTensor& y() { return y_on_ ? y_on_->tensor() : *y_host_; }
  /// Wait for the device's queued work (a forward on a device returns once queued).
  void wait() const {
    if (device_) device_.synchronize(nullptr);
  }
  /// Copy y back into the host tensor and wait for it.
  void finish() {
    if (!y_on_) return;
    y_on_->download(*y_host_, nullptr);
    device_.synchronize(nullptr);
  }

 private:
  sdk::host::Device device_;
  const DLTensor* x_host_;
  DLTensor* y_host_;
  std::optional<sdk::host::StagedTensor> x_on_, y_on_;
};

}  // namespace nibble::cli
