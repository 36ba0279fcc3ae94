// Packing for the Marlin kernels and the upload of packed weights.
#include "marlin_weight.hpp"

#include <cuda_runtime_api.h>

#include <nibble/sdk/numeric.hpp>

#include "cuda_error.hpp"

namespace nibble::cuda {

namespace {

DType dtype_of(DLDataType t, const std::string& what) {
  if (sdk::same_dtype(t, sdk::dtype_f16())) return DType::f16;
  if (sdk::same_dtype(t, sdk::dtype_bf16())) return DType::bf16;
  if (sdk::same_dtype(t, sdk::dtype_f32())) return DType::f32;
  throw sdk::PluginError(NIBBLE_INVALID_ARGUMENT, what + ": scales of dtype " + sdk::dtype_name(t) +
                                                      " (expected f16, bf16 or f32)");
}

void copy_into(const DeviceBuffer& b, size_t offset, const void* host, size_t bytes, int device,
               const std::string& what) {
  if (bytes == 0) return;
  DeviceGuard guard(device);
  check(cudaMemcpy(static_cast<char*>(b.get()) + offset, host, bytes, cudaMemcpyHostToDevice),
        what + ": uploading " + std::to_string(bytes) + " bytes");
}

}  // namespace

MarlinHost pack_marlin(const sdk::QuantWeight& w, bool keep_zero_points, const std::string& what) {
  MarlinHost h;
  try {
    h.packed = sdk::marlin::pack(w, keep_zero_points);
  } catch (const sdk::PluginError& e) {
    if (e.status() != NIBBLE_UNSUPPORTED) throw;
    throw sdk::PluginError(NIBBLE_UNSUPPORTED,
                           what + ": " + e.what() + "; the cuda backend's general kernel takes it");
  }
  const sdk::marlin::Packed& p = h.packed;
  const int64_t slabs = p.K / 16;
  h.slab_groups.resize(size_t(slabs));
  for (int64_t s = 0; s < slabs; ++s) {
    if (p.groups.empty()) {
      h.slab_groups[size_t(s)] = p.single_group ? 0 : int32_t(16 * s / p.group_size);
      continue;
    }
    const int32_t g = p.groups[size_t(16 * s)];
    for (int64_t r = 1; r < 16; ++r)
      if (p.groups[size_t(16 * s + r)] != g)
        throw sdk::PluginError(
            NIBBLE_UNSUPPORTED,
            what + ": act-order groups do not fill whole 16-row slabs once sorted (rows " +
                std::to_string(16 * s) + ".." + std::to_string(16 * s + 15) + " span groups " +
                std::to_string(g) + " and " + std::to_string(p.groups[size_t(16 * s + r)]) +
                "); the cuda backend's general kernel takes it");
    h.slab_groups[size_t(s)] = g;
  }
  const DType dtype = dtype_of(p.scales_dtype, what);
  h.scales.resize(p.scales.size() * dtype_size(dtype));
  for (size_t i = 0; i < p.scales.size(); ++i)
    sdk::store_float(h.scales.data(), p.scales_dtype, i, p.scales[i]);  // exact: same dtype
  return h;
}

MarlinStack::MarlinStack(int device, int count, const MarlinHost& first)
    : device_(device), count_(count) {
  const sdk::marlin::Packed& p = first.packed;
  num_groups_ = p.num_groups;
  view_.bits = p.bits;
  view_.single_group = p.single_group;
  view_.K = p.K;
  view_.N = p.N;
  if (p.groups.empty()) view_.group_slabs = int32_t(p.single_group ? p.K / 16 : p.group_size / 16);
  view_.scale_dtype = dtype_of(p.scales_dtype, "weight");
  view_.expert_qweight = int64_t(p.qweight.size());
  view_.expert_scales = int64_t(p.scales.size());
  view_.expert_zeros = int64_t(p.zeros.size());
  view_.expert_slabs = int64_t(first.slab_groups.size());
  view_.expert_columns = int64_t(p.columns.size());
  const size_t n = size_t(count);
  qweight_ = DeviceBuffer(device, n * p.qweight.size() * sizeof(uint32_t));
  scales_ = DeviceBuffer(device, n * first.scales.size());
  zeros_ = DeviceBuffer(device, n * p.zeros.size() * sizeof(uint32_t));
  slab_groups_ = DeviceBuffer(device, n * first.slab_groups.size() * sizeof(int32_t));
  columns_ = DeviceBuffer(device, n * p.columns.size() * sizeof(int32_t));
  view_.qweight = qweight_.as<const uint32_t>();
  view_.scales = scales_.get();
  view_.zeros = zeros_.as<const uint32_t>();
  view_.slab_groups = slab_groups_.as<const int32_t>();
  view_.columns = columns_.as<const int32_t>();
  put(0, first, "weight 0");
}

void MarlinStack::put(int index, const MarlinHost& w, const std::string& what) {
  const sdk::marlin::Packed& p = w.packed;
  sdk::require(index >= 0 && index < count_, what + ": index " + std::to_string(index) +
                                                 " outside the stack of " + std::to_string(count_));
  sdk::require(p.K == view_.K && p.N == view_.N && p.bits == view_.bits &&
                   p.single_group == view_.single_group && p.num_groups == num_groups_ &&
                   int64_t(p.qweight.size()) == view_.expert_qweight &&
                   int64_t(p.zeros.size()) == view_.expert_zeros &&
                   int64_t(p.columns.size()) == view_.expert_columns &&
                   dtype_of(p.scales_dtype, what) == view_.scale_dtype,
               what +
                   ": shaped unlike the first weight of its stack (shape, bits, groups, zero "
                   "points, act-order and scale dtype must agree)");
  const size_t i = size_t(index);
  copy_into(qweight_, i * p.qweight.size() * 4, p.qweight.data(), p.qweight.size() * 4, device_,
            what);
  copy_into(scales_, i * w.scales.size(), w.scales.data(), w.scales.size(), device_, what);
  copy_into(zeros_, i * p.zeros.size() * 4, p.zeros.data(), p.zeros.size() * 4, device_, what);
  copy_into(slab_groups_, i * w.slab_groups.size() * 4, w.slab_groups.data(),
            w.slab_groups.size() * 4, device_, what);
  copy_into(columns_, i * p.columns.size() * 4, p.columns.data(), p.columns.size() * 4, device_,
            what);
}

size_t MarlinStack::bytes() const {
  return qweight_.bytes() + scales_.bytes() + zeros_.bytes() + slab_groups_.bytes() +
         columns_.bytes();
}

}  // namespace nibble::cuda
