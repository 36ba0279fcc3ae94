// The C++ object model a plugin author implements: a Backend (probe, kernel list, device memory,
// shutdown), its Kernels (what they can implement, on which device, prepare) and their Prepared
// weights (forward). The C glue (glue.hpp) turns these into the ABI's tables.
#pragma once

#include <nibble/sdk/plugin.h>
#include <nibble/sdk/device.hpp>
#include <nibble/sdk/plugin/device_memory.hpp>
#include <nibble/sdk/plugin/error.hpp>
#include <nibble/sdk/plugin/tensor_checks.hpp>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace nibble::sdk {

/// The largest effective zero point the host reports for the layer's weight (`w2` for MoE's
/// down projection), or 0 when the host is older than ABI 1.1 or does not know.
inline int max_zero(const nibble_layer_desc& d, bool w2 = false) {
#if NIBBLE_ABI_MINOR >= 1
  size_t offset =
      w2 ? offsetof(nibble_layer_desc, w2_max_zero) : offsetof(nibble_layer_desc, max_zero);
  if (!has_field(d.struct_size, offset, sizeof(int32_t))) return 0;
  return w2 ? d.w2_max_zero : d.max_zero;
#else
  (void)d;
  (void)w2;
  return 0;
#endif
}

/// Scratch, threads and stream for one forward call.
struct Exec {
  void* workspace = nullptr;  ///< host memory, even for a device kernel (which owns its scratch)
  size_t workspace_size = 0;
  int num_threads = 1;
  /// The device stream to queue the forward on (CUDA: a cudaStream_t); nullptr for the default
  /// stream, and always for a host older than ABI 1.3. A device forward returns once queued.
  void* stream = nullptr;
};

/// A prepared (repacked) weight. Immutable after construction: forward is const and may run
/// concurrently.
class Prepared {
 public:
  virtual ~Prepared() = default;
  /// Bytes this prepared weight holds.
  virtual size_t bytes() const = 0;
  /// Workspace bytes a forward with M rows needs.
  virtual size_t workspace_bytes(int64_t /*M*/) const { return 0; }
  /// Compute y from x (and the routing for MoE).
  virtual void forward(const ForwardArgs& args, const Exec& exec) const = 0;

  /// The layer this weight was prepared for (copied at prepare; `desc().name` is valid).
  const nibble_layer_desc& desc() const { return desc_; }
  /// Remember the layer (called by the C++ layer after prepare).
  void set_desc(const nibble_layer_desc& d) {
    name_ = d.name ? d.name : "";
    desc_ = nibble_layer_desc{};
    std::memcpy(&desc_, &d, std::min<size_t>(d.struct_size, sizeof desc_));
    desc_.struct_size = sizeof desc_;
    desc_.name = name_.c_str();
  }

 private:
  nibble_layer_desc desc_{};
  std::string name_;
};

/// What a kernel declares about itself.
struct KernelInfo {
  std::string name;
  nibble_op op = NIBBLE_OP_LINEAR;
  int priority = 0;
  nibble_numeric_mode mode = NIBBLE_MODE_W4A16;
  double bound_f32 = 0;
  double bound_f16 = 0;
  double bound_bf16 = 0;
  /// The DLDeviceType forward's tensors live on: kDLCPU (host memory, also pinned) by default; a
  /// device kernel's backend must also give DeviceMemory of this type (Backend::device_memory).
  int32_t device_type = kDLCPU;
};

/// A kernel: says what it can implement and prepares weights for it.
class Kernel {
 public:
  virtual ~Kernel() = default;
  /// Name, op, priority, numeric mode and error bounds.
  virtual KernelInfo info() const = 0;
  /// Empty if this kernel computes `desc` correctly, else the reason it cannot.
  virtual std::string why_not(const nibble_layer_desc& desc) const = 0;
  /// Repack the weight (desc.op says which member of `weight` is set).
  virtual std::unique_ptr<Prepared> prepare(const nibble_layer_desc& desc,
                                            const nibble_weight_input& weight) const = 0;
};

/// The probe's answer.
struct Probe {
  bool available = false;
  uint32_t reasons = 0;
  std::string detail;
};

/// Base class of a backend. Derive, give it static `name`, `version`, `vendor`, `description`
/// (const char*), override what you need, and pass it to NIBBLE_PLUGIN. One instance exists per
/// load (per host context), made at the entry point and destroyed when the host ends that load.
class Backend {
 public:
  virtual ~Backend() = default;
  /// Is the backend usable here? Must not start threads.
  virtual Probe probe() { return Probe{true, 0, ""}; }
  /// The kernels this backend offers (called once per load, at the entry point).
  virtual std::vector<std::unique_ptr<Kernel>> make_kernels() = 0;
  /// The device memory of this load (called once, at the entry point, after make_kernels): needed
  /// when a kernel runs on a device, nullptr (the default) for a CPU backend. The Backend owns it;
  /// it must stay valid until shutdown has returned.
  virtual DeviceMemory* device_memory() { return nullptr; }
  /// Join every thread the backend started.
  virtual void shutdown() {}
};

}  // namespace nibble::sdk
