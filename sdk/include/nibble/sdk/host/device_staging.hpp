// Host tensors staged on a device (ABI 1.3): a copy of a 2-D host DLTensor in device memory
// allocated through the plugin's nibble_device_memory, with a DLTensor that views it, and a whole
// forward call's tensors staged at once. What lets a host that holds its activations in host
// memory (the CLI, the conformance kit, tests) drive a device kernel unchanged. Nothing here
// depends on the ABI minor's layouts. Header-only.
#pragma once

#include <nibble/sdk/plugin.h>
#include <nibble/sdk/host/device.hpp>
#include <nibble/sdk/numeric.hpp>

#include <cstdint>
#include <optional>

namespace nibble::sdk::host {

/// The bytes a 2-D tensor's elements span from its data pointer plus byte_offset (row gaps
/// included), or nullopt when its layout is not one a copy can follow (not 2-D, no shape, a
/// negative size or stride, columns not contiguous, a dtype of less than a byte, no data).
inline std::optional<size_t> span_bytes(const DLTensor& t) {
  if (t.ndim != 2 || !t.shape || t.shape[0] < 0 || t.shape[1] < 0) return std::nullopt;
  if (t.dtype.bits == 0 || t.dtype.bits % 8 != 0 || t.dtype.lanes != 1) return std::nullopt;
  const int64_t rows = t.shape[0], cols = t.shape[1];
  int64_t row_stride = cols;
  if (t.strides) {
    if (cols > 1 && t.strides[1] != 1) return std::nullopt;
    if (rows > 1) row_stride = t.strides[0];
    if (row_stride < cols) return std::nullopt;
  }
  if (rows == 0 || cols == 0) return size_t(0);
  if (!t.data) return std::nullopt;
  return size_t((rows - 1) * row_stride + cols) * size_t(t.dtype.bits / 8);
}

/// A host tensor's copy on a device: the same shape, strides and dtype (the host's shape and
/// stride arrays are borrowed), its span of bytes in a DeviceBuffer.
class StagedTensor {
 public:
  /// Allocate room for `host` on `device` and queue the upload of its bytes on `stream` (the
  /// host memory must stay valid until the stream is synchronized). Throws CallError when the
  /// layout cannot be copied (span_bytes) or the plugin's memory calls fail.
  StagedTensor(const Device& device, const DLTensor& host, void* stream) : tensor_(host) {
    const std::optional<size_t> bytes = span_bytes(host);
    if (!bytes)
      throw CallError(NIBBLE_INVALID_ARGUMENT, "stage",
                      "the tensor's layout cannot be copied to a device");
    tensor_.device = device.dl_device();
    tensor_.byte_offset = 0;
    tensor_.data = nullptr;
    if (*bytes == 0) return;
    buffer_ = device.alloc(*bytes);
    buffer_.upload(static_cast<const char*>(host.data) + host.byte_offset, *bytes, stream);
    tensor_.data = buffer_.get();
  }
  /// The tensor on the device.
  DLTensor& tensor() { return tensor_; }
  /// Queue the copy of the device bytes back into `host` (the tensor this was staged from).
  void download(const DLTensor& host, void* stream) const {
    if (buffer_.get())
      buffer_.download(static_cast<char*>(host.data) + host.byte_offset, buffer_.size(), stream);
  }

 private:
  DLTensor tensor_;
  DeviceBuffer buffer_;
};

/// A forward call's host tensors staged on a device: x, y and any routing uploaded at
/// construction (y too, so what the kernel leaves unwritten reads back as it was), y read back by
/// finish(). A tensor whose layout cannot be copied (span_bytes: not 2-D, bad strides, no data) is
/// malformed: it is passed with its data as it is but labelled with the device, so that the
/// kernel's own checks meet the defect itself rather than a tensor on the wrong device.
class StagedForward {
 public:
  /// Stage `host`'s tensors on `device`, queued on `stream`.
  StagedForward(const Device& device, const nibble_forward_args& host, void* stream)
      : device_(device), host_(host), args_(host), stream_(stream) {
    args_.x = stage(x_, malformed_[0], host.x);
    args_.y = stage(y_, malformed_[1], host.y);
    args_.topk_ids = stage(ids_, malformed_[2], host.topk_ids);
    args_.topk_weights = stage(weights_, malformed_[3], host.topk_weights);
  }
  StagedForward(const StagedForward&) = delete;
  StagedForward& operator=(const StagedForward&) = delete;
  /// Waits for the stream when finish() was not reached, so no buffer is freed under queued work.
  ~StagedForward() {
    if (finished_) return;
    try {
      device_.synchronize(stream_);
    } catch (...) {
    }
  }

  /// The arguments to hand the device kernel.
  const nibble_forward_args& args() const { return args_; }
  /// Read y back into the host tensor and wait for the stream.
  void finish() {
    if (y_) y_->download(*host_.y, stream_);
    finished_ = true;
    device_.synchronize(stream_);
  }

 private:
  DLTensor* stage(std::optional<StagedTensor>& slot, DLTensor& relabelled, const DLTensor* host) {
    if (!host) return nullptr;
    if (!span_bytes(*host)) {
      relabelled = *host;
      relabelled.device = device_.dl_device();
      return &relabelled;
    }
    slot.emplace(device_, *host, stream_);
    return &slot->tensor();
  }
  Device device_;
  nibble_forward_args host_;
  nibble_forward_args args_;
  void* stream_;
  bool finished_ = false;
  std::optional<StagedTensor> x_, y_, ids_, weights_;
  DLTensor malformed_[4]{};
};

}  // namespace nibble::sdk::host
