// The checks every tensor passes before a kernel sees it: 2-D, on the kernel's device (CPU memory
// for a CPU kernel), unit column stride, the layer's shapes and dtypes, routing ids in range (CPU
// only: device memory is not readable here). The same for every plugin, so a plugin called
// directly (without the core's own checks) rejects bad input with the same messages. A message is
// built only when a check fails: a valid forward allocates nothing here.
#pragma once

#include <nibble/sdk/plugin.h>
#include <nibble/sdk/device.hpp>
#include <nibble/sdk/numeric.hpp>
#include <nibble/sdk/plugin/error.hpp>

#include <cstdint>
#include <string>

namespace nibble::sdk {
namespace detail {

// Throw INVALID_ARGUMENT; callers build the message only on the failing branch.
[[noreturn]] inline void reject(const std::string& message) {
  throw PluginError(NIBBLE_INVALID_ARGUMENT, message);
}

}  // namespace detail

/// The device the host asks the layer to run on (ABI 1.3): kDLCPU with index 0 when the host is
/// older or left it unset.
inline DLDevice layer_device(const nibble_layer_desc& d) {
#if NIBBLE_ABI_MINOR >= 3
  if (has_field(d.struct_size, offsetof(nibble_layer_desc, device_id), sizeof(int32_t)))
    return DLDevice{DLDeviceType(normal_device_type(d.device_type)), d.device_id};
#else
  (void)d;
#endif
  return DLDevice{kDLCPU, 0};
}

/// A validated 2-D view of a DLTensor: rows × cols, unit column stride, row stride in elements.
/// On a device (not CPU memory) `data` is a device address: row() is pointer arithmetic only, and
/// get/set/get_int must not be called.
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

/// Check that `t` is a 2-D tensor with unit column stride on `device` (any CPU memory when that is
/// kDLCPU, else exactly that device type and index) and view it; `what` names it.
inline Matrix as_matrix(const DLTensor* t, const char* what, const DLDevice& device) {
  if (t == nullptr) detail::reject(std::string(what) + ": tensor is missing");
  if (t->ndim != 2)
    detail::reject(std::string(what) + ": expected a 2-D tensor, got " + std::to_string(t->ndim) +
                   " dimensions");
  if (!tensor_fits_device(t->device, device))
    detail::reject(std::string(what) + ": the tensor is on " + device_name(t->device) +
                   ", the kernel runs on " + device_name(device) +
                   (normal_device_type(device.device_type) == kDLCPU
                        ? " (host memory: cpu, cuda_host or rocm_host)"
                        : ""));
  if (t->dtype.lanes != 1 || t->dtype.bits % 8 != 0 || t->dtype.bits == 0)
    detail::reject(std::string(what) + ": unsupported dtype " + dtype_name(t->dtype));
  if (t->shape == nullptr || t->shape[0] < 0 || t->shape[1] < 0)
    detail::reject(std::string(what) + ": bad shape");
  Matrix m;
  m.dtype = t->dtype;
  m.rows = t->shape[0];
  m.cols = t->shape[1];
  m.stride = m.cols;
  if (t->strides) {
    if (t->strides[1] != 1 && m.cols > 1)
      detail::reject(std::string(what) + ": columns must be contiguous (stride 1), got stride " +
                     std::to_string(t->strides[1]));
    if (t->strides[0] < m.cols && m.rows > 1)
      detail::reject(std::string(what) + ": row stride " + std::to_string(t->strides[0]) +
                     " is smaller than the row length " + std::to_string(m.cols));
    if (m.rows > 1) m.stride = t->strides[0];
  }
  if (t->data == nullptr && m.rows * m.cols != 0)
    detail::reject(std::string(what) + ": data is null");
  m.data = static_cast<char*>(t->data) + t->byte_offset;
  return m;
}

/// Check that `t` is a 2-D tensor in CPU memory with unit column stride and view it.
inline Matrix as_matrix(const DLTensor* t, const char* what) {
  return as_matrix(t, what, DLDevice{kDLCPU, 0});
}

/// The arguments of one forward call, validated against the layer.
struct ForwardArgs {
  Matrix x;             ///< [M, K]
  Matrix y;             ///< [M, N] (MoE: [M, K]), same dtype as x
  Matrix topk_ids;      ///< MoE: [M, top_k] int32/int64
  Matrix topk_weights;  ///< MoE: [M, top_k] f32/f16/bf16
  int64_t M = 0;
  /// Where every tensor above lives: {kDLCPU, 0} for a CPU kernel, else the kernel's device type
  /// and the layer's device index (layer_device).
  DLDevice device{kDLCPU, 0};
};

/// Check one forward call's tensors against layer `d` for a kernel running on `device_type` and
/// view them. On a device the routing ids are not range-checked (their memory is not readable
/// here): a device MoE kernel must treat an id outside [-1, num_experts) safely itself.
inline ForwardArgs check_forward_args(const nibble_layer_desc& d, const nibble_forward_args* a,
                                      int32_t device_type = kDLCPU) {
  if (a == nullptr) detail::reject("forward arguments are missing");
  ForwardArgs f;
  if (normal_device_type(device_type) != kDLCPU)
    f.device = DLDevice{DLDeviceType(device_type), layer_device(d).device_id};
  f.x = as_matrix(a->x, "x", f.device);
  f.y = as_matrix(a->y, "y", f.device);
  const int64_t out_cols = d.op == NIBBLE_OP_MOE ? d.K : d.N;
  if (!is_float_dtype(f.x.dtype))
    detail::reject("x: dtype " + dtype_name(f.x.dtype) + " is not one of f32, f16, bf16");
  if (!same_dtype(f.x.dtype, f.y.dtype))
    detail::reject("y: dtype " + dtype_name(f.y.dtype) + " differs from x's " +
                   dtype_name(f.x.dtype));
  if (f.x.cols != d.K)
    detail::reject("x: expected " + std::to_string(d.K) + " columns (K), got " +
                   std::to_string(f.x.cols));
  if (f.y.cols != out_cols)
    detail::reject("y: expected " + std::to_string(out_cols) + " columns, got " +
                   std::to_string(f.y.cols));
  if (f.y.rows != f.x.rows)
    detail::reject("y: expected " + std::to_string(f.x.rows) + " rows (as x), got " +
                   std::to_string(f.y.rows));
  f.M = f.x.rows;
  if (d.op != NIBBLE_OP_MOE) return f;
  f.topk_ids = as_matrix(a->topk_ids, "topk_ids", f.device);
  f.topk_weights = as_matrix(a->topk_weights, "topk_weights", f.device);
  if (f.topk_ids.dtype.code != kDLInt ||
      (f.topk_ids.dtype.bits != 32 && f.topk_ids.dtype.bits != 64))
    detail::reject("topk_ids: dtype " + dtype_name(f.topk_ids.dtype) + " is not int32 or int64");
  if (!is_float_dtype(f.topk_weights.dtype))
    detail::reject("topk_weights: dtype " + dtype_name(f.topk_weights.dtype) +
                   " is not one of f32, f16, bf16");
  for (const Matrix* m : {&f.topk_ids, &f.topk_weights})
    if (m->rows != f.M || m->cols != d.top_k)
      detail::reject(std::string(m == &f.topk_ids ? "topk_ids" : "topk_weights") + ": expected [" +
                     std::to_string(f.M) + ", " + std::to_string(d.top_k) + "], got [" +
                     std::to_string(m->rows) + ", " + std::to_string(m->cols) + "]");
  if (!is_cpu_memory(f.device)) return f;
  for (int64_t m = 0; m < f.M; ++m)
    for (int64_t j = 0; j < d.top_k; ++j) {
      int64_t e = f.topk_ids.get_int(m, j);
      if (e < -1 || e >= d.num_experts)
        detail::reject("topk_ids[" + std::to_string(m) + ", " + std::to_string(j) +
                       "] = " + std::to_string(e) + " is outside [0, " +
                       std::to_string(d.num_experts) + ") (or -1 for no expert)");
    }
  return f;
}

}  // namespace nibble::sdk
