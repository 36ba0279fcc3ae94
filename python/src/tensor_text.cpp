#include "tensor_text.hpp"

#include <iterator>

namespace nibble::python {

std::string dtype_text(DLDataType d) {
  if (d.lanes == 1) {
    if (d.code == kDLFloat && (d.bits == 16 || d.bits == 32 || d.bits == 64))
      return "float" + std::to_string(d.bits);
    if (d.code == kDLBfloat && d.bits == 16) return "bfloat16";
    if (d.code == kDLInt) return "int" + std::to_string(d.bits);
    if (d.code == kDLUInt) return "uint" + std::to_string(d.bits);
  }
  return "dtype code " + std::to_string(d.code) + ", " + std::to_string(d.bits) + " bits x " +
         std::to_string(d.lanes) + " lanes";
}

std::string device_text(DLDevice d) {
  // By number: DLPack versions after Debian's 0.6 add types (oneapi, webgpu, hexagon) that a
  // newer producer may send.
  static constexpr const char* kNames[] = {
      nullptr,   "cpu",          "cuda",   "cuda_host", "opencl", nullptr,
      nullptr,   "vulkan",       "metal",  "vpi",       "rocm",   "rocm_host",
      "ext_dev", "cuda_managed", "oneapi", "webgpu",    "hexagon"};
  const int type = int(d.device_type);
  const bool known = type >= 0 && type < int(std::size(kNames)) && kNames[type];
  return (known ? std::string(kNames[type]) : "device type " + std::to_string(type)) + ":" +
         std::to_string(d.device_id);
}

std::string shape_text(const int64_t* shape, int ndim) {
  std::string s = "[";
  for (int i = 0; i < ndim; ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string shape_text(std::span<const int64_t> leading, int64_t last) {
  std::vector<int64_t> shape(leading.begin(), leading.end());
  shape.push_back(last);
  return shape_text(shape);
}

std::string shape_text(const std::vector<int64_t>& shape) {
  return shape_text(shape.data(), int(shape.size()));
}

}  // namespace nibble::python
