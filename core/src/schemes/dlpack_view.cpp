// DLTensor → TensorView with the checks an engine's tensor needs before the schemes read it.
#include "dlpack_view.hpp"

#include <nibble/error.hpp>
#include <nibble/sdk/device.hpp>
#include <nibble/sdk/numeric.hpp>

#include <fmt/format.h>

#include <iterator>
#include <limits>
#include <optional>
#include <vector>

#include "text/name_text.hpp"

namespace nibble::detail {

namespace {

// Every dtype a checkpoint tensor may have; BOOL is left out, since DLPack 0.6 spells it uint8.
constexpr DType kViewable[] = {DType::F16, DType::BF16, DType::F32, DType::F64, DType::I8,
                               DType::U8,  DType::I16,  DType::I32, DType::I64};

std::optional<DType> safetensors_dtype(DLDataType d) {
  for (DType t : kViewable)
    if (sdk::same_dtype(to_dlpack(t), d)) return t;
  return std::nullopt;
}

std::string dl_dtype_text(DLDataType d) {
  static const char* const kCodes[] = {"int", "uint", "float", "opaque", "bfloat", "complex"};
  std::string s = d.code < std::size(kCodes) ? fmt::format("{}{}", kCodes[d.code], d.bits)
                                             : fmt::format("code {} bits {}", int(d.code), d.bits);
  if (d.lanes != 1) s += fmt::format(" x{} lanes", d.lanes);
  return s;
}

}  // namespace

TensorView dlpack_view(const DLTensor& t, const std::string& name, const std::string& file) {
  const std::string what = fmt::format("tensor {} in {}", name_text(name), file);
  if (!sdk::is_cpu_memory(t.device))
    throw Error(
        fmt::format("{} is on device type {} (id {}); expected CPU memory (kDLCPU, or "
                    "pinned host memory kDLCUDAHost/kDLROCMHost)",
                    what, int(t.device.device_type), t.device.device_id));
  if (t.ndim < 0 || size_t(t.ndim) > kMaxRank || (t.ndim > 0 && !t.shape))
    throw Error(fmt::format("{} has {} dimensions{}; expected 0 to {} with a shape", what, t.ndim,
                            t.ndim > 0 && !t.shape ? " and no shape array" : "", kMaxRank));
  std::vector<int64_t> shape(t.shape, t.shape + t.ndim);
  TensorView v;
  v.name = name;
  v.file = file;
  v.shape = shape;
  const std::optional<DType> dtype = safetensors_dtype(t.dtype);
  if (!dtype)
    throw Error(
        fmt::format("{} has shape {} and dtype {}; expected one of float16, bfloat16, "
                    "float32, float64, int8, int16, int32, int64, uint8 with one lane",
                    what, v.shape_string(), dl_dtype_text(t.dtype)));
  v.dtype = *dtype;
  const size_t elem = dtype_size(v.dtype);
  uint64_t count = 1;
  for (int64_t s : shape) {
    if (s < 0)
      throw Error(fmt::format("{} has shape {} with a negative size", what, v.shape_string()));
    if (s > 0 && count > std::numeric_limits<uint64_t>::max() / elem / uint64_t(s))
      throw Error(
          fmt::format("{} has shape {}, which overflows a byte count", what, v.shape_string()));
    count *= uint64_t(s);
  }
  if (t.strides) {
    int64_t expect = 1;
    for (int d = t.ndim - 1; d >= 0; --d) {
      // A dimension of size 1 may carry any stride: it is never stepped over.
      if (shape[size_t(d)] != 1 && t.strides[d] != expect) {
        std::vector<int64_t> strides(t.strides, t.strides + t.ndim);
        throw Error(
            fmt::format("{} has shape {} and strides [{}] (in elements); expected a "
                        "row-major contiguous tensor (make it contiguous first)",
                        what, v.shape_string(), fmt::join(strides, ", ")));
      }
      expect *= shape[size_t(d)];
    }
  }
  if (t.byte_offset % elem != 0)
    throw Error(
        fmt::format("{} has byte_offset {}, which is not a whole number of its {}-byte "
                    "elements",
                    what, t.byte_offset, elem));
  if (count > 0 && !t.data)
    throw Error(fmt::format("{} has shape {} but no data", what, v.shape_string()));
  v.nbytes = size_t(count) * elem;
  v.data = count > 0 ? static_cast<const std::byte*>(t.data) + t.byte_offset : nullptr;
  return v;
}

TensorView first_dim_slice(const TensorView& stacked, int64_t index, const std::string& name) {
  if (stacked.shape.size() < 2 || index < 0 || index >= stacked.shape[0])
    throw Error(fmt::format("internal: slice {} of tensor {} with shape {}", index,
                            name_text(stacked.name), stacked.shape_string()));
  TensorView v;
  v.name = name;
  v.file = stacked.file;
  v.dtype = stacked.dtype;
  v.shape.assign(stacked.shape.begin() + 1, stacked.shape.end());
  v.nbytes = stacked.shape[0] > 0 ? stacked.nbytes / size_t(stacked.shape[0]) : 0;
  v.data = stacked.data ? stacked.data + size_t(index) * v.nbytes : nullptr;
  return v;
}

}  // namespace nibble::detail
