// Driving the cuda plugin the way a host without CUDA does: the plugin loaded through its C ABI,
// tensors allocated, filled and read back through its own nibble_device_memory table, forward
// queued on the default stream and synchronized.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "cuda_test_util.hpp"
#include "plugin_harness.hpp"

namespace nibble::test {

/// The cuda plugin of this build, loaded once per test program.
inline HarnessPlugin& cuda_plugin() {
  static HarnessPlugin* p = new HarnessPlugin("cuda");
  return *p;
}

/// The plugin's device memory table and load.
inline const nibble_device_memory& device_memory() {
  const nibble_device_memory* m = cuda_plugin().plugin().device_memory;
  if (!m) throw std::runtime_error("the cuda plugin gives no device memory");
  return *m;
}
inline void* load_context() { return cuda_plugin().plugin().plugin_context; }

/// A 2-D tensor on cuda:0 in memory from the plugin's alloc.
class DeviceTensor {
 public:
  DeviceTensor(int64_t rows, int64_t cols, DLDataType dtype, int64_t row_stride = 0)
      : stride_(row_stride > 0 ? row_stride : cols) {
    bytes_ = size_t(rows > 0 ? (rows - 1) * stride_ + cols : 0) * sdk::dtype_bytes(dtype) + 16;
    ErrorBuffer err;
    EXPECT_EQ(device_memory().alloc(load_context(), 0, bytes_, &ptr_, err.get()), NIBBLE_OK)
        << err.text();
    shape_[0] = rows;
    shape_[1] = cols;
    strides_[0] = stride_;
    strides_[1] = 1;
    t_.data = ptr_;
    t_.device = DLDevice{kDLCUDA, 0};
    t_.ndim = 2;
    t_.dtype = dtype;
    t_.shape = shape_;
    t_.strides = row_stride > 0 ? strides_ : nullptr;
  }
  ~DeviceTensor() { device_memory().free(load_context(), 0, ptr_); }
  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;

  /// Copy packed rows × cols host bytes in (row stride applied on the device side).
  void upload(const std::vector<uint8_t>& packed) {
    std::vector<uint8_t> full(bytes_, 0);
    const size_t row = size_t(shape_[1]) * sdk::dtype_bytes(t_.dtype);
    for (int64_t r = 0; r < shape_[0]; ++r)
      std::memcpy(&full[size_t(r * stride_) * sdk::dtype_bytes(t_.dtype)], &packed[size_t(r) * row],
                  row);
    copy(ptr_, full.data(), NIBBLE_COPY_HOST_TO_DEVICE);
  }
  /// Fill every byte with NaN of the tensor's dtype.
  void poison() {
    std::vector<uint8_t> full(bytes_);
    ::nibble::test::poison(full, t_.dtype);
    copy(ptr_, full.data(), NIBBLE_COPY_HOST_TO_DEVICE);
  }
  /// The packed rows × cols bytes, after synchronizing.
  std::vector<uint8_t> download() {
    std::vector<uint8_t> full(bytes_);
    copy(full.data(), ptr_, NIBBLE_COPY_DEVICE_TO_HOST);
    const size_t row = size_t(shape_[1]) * sdk::dtype_bytes(t_.dtype);
    std::vector<uint8_t> packed(size_t(shape_[0]) * row);
    for (int64_t r = 0; r < shape_[0]; ++r)
      std::memcpy(&packed[size_t(r) * row], &full[size_t(r * stride_) * sdk::dtype_bytes(t_.dtype)],
                  row);
    return packed;
  }
  DLTensor* get() { return &t_; }

 private:
  void copy(void* dst, const void* src, int32_t direction) {
    ErrorBuffer err;
    EXPECT_EQ(
        device_memory().copy(load_context(), 0, dst, src, bytes_, direction, nullptr, err.get()),
        NIBBLE_OK)
        << err.text();
    EXPECT_EQ(device_memory().synchronize(load_context(), 0, nullptr, err.get()), NIBBLE_OK)
        << err.text();
  }
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  int64_t stride_ = 0;
  int64_t shape_[2] = {0, 0}, strides_[2] = {0, 1};
  DLTensor t_{};
};

/// `d` asked for on cuda:`device`.
inline nibble_layer_desc on_cuda(nibble_layer_desc d, int device = 0) {
  d.device_type = kDLCUDA;
  d.device_id = device;
  return d;
}

/// Forward `p` on the device and read y back: status, relative error against `expected`, and the
/// count of outputs not written (still NaN) or not finite.
struct DeviceRun {
  nibble_status status = NIBBLE_OK;
  std::string message;
  double rel_error = 0;
  size_t not_finite = 0;
};

inline DeviceRun run_on_device(const PreparedLayer& p, DeviceTensor& x, DeviceTensor& y,
                               const std::vector<double>& expected, DeviceTensor* ids = nullptr,
                               DeviceTensor* weights = nullptr) {
  DeviceRun r;
  y.poison();
  r.status = p.forward(x.get(), y.get(), ids ? ids->get() : nullptr,
                       weights ? weights->get() : nullptr, 1, &r.message);
  if (r.status != NIBBLE_OK) return r;
  const std::vector<uint8_t> bytes = y.download();
  const std::vector<double> got = read_output(
      bytes, y.get()->dtype, bytes.size() / sdk::dtype_bytes(y.get()->dtype), &r.not_finite);
  r.rel_error = relative_error(got, expected);
  return r;
}

}  // namespace nibble::test
