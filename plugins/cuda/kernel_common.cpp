// What the cuda backend's kernels share: their declared bounds, the device check and the checks
// of a quantized layer.
#include <nibble/sdk/portable_kernels.hpp>

#include "bounds.hpp"
#include "device_memory.hpp"
#include "kernels.hpp"

namespace nibble::cuda {

sdk::KernelInfo kernel_info(const char* name, nibble_op op, int priority,
                            nibble_numeric_mode mode) {
  sdk::KernelInfo k;
  k.name = name;
  k.op = op;
  k.priority = priority;
  k.mode = mode;
  k.bound_f32 = kBoundF32;
  k.bound_f16 = kBoundF16;
  k.bound_bf16 = kBoundBf16;
  k.device_type = kDLCUDA;
  return k;
}

std::string why_not_device(const nibble_layer_desc& d) {
  const DLDevice dev = sdk::layer_device(d);
  const int count = cuda_device_count();
  if (dev.device_id < 0 || dev.device_id >= count)
    return "cuda:" + std::to_string(dev.device_id) + " does not exist (this machine has " +
           std::to_string(count) + " CUDA device" + (count == 1 ? "" : "s") + ")";
  return "";
}

std::string why_not_quantized(const nibble_layer_desc& d) {
  if (d.numeric_mode != NIBBLE_MODE_W4A16)
    return "the cuda backend's quantized kernels keep activations in f32/f16/bf16 (w4a16); "
           "numeric mode " +
           std::to_string(d.numeric_mode) + " (e.g. w4a8's int8 activations) is not implemented";
  if (d.bits != 4 && d.bits != 8)
    return std::to_string(d.bits) + "-bit weights: the cuda backend packs 4- or 8-bit values";
  const std::string shape = sdk::portable::why_not_quantized_shape(d);
  if (!shape.empty()) return shape;
  return why_not_device(d);
}

}  // namespace nibble::cuda
