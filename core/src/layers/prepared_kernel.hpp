// A kernel together with a weight it prepared: the host side of prepare/forward/release, with
// the host's tensor validation (shapes, dtypes, and the device the kernel runs on) and workspace
// handling.
#pragma once

#include <nibble/error.hpp>
#include <nibble/registry.hpp>
#include <nibble/runtime.hpp>
#include <nibble/sdk/host/device.hpp>
#include <nibble/sdk/host/prepared.hpp>

#include <memory>
#include <string>

namespace nibble {

/// Thrown when a kernel's prepare answers UNSUPPORTED: the next candidate may take the layer.
class PrepareUnsupported : public Error {
 public:
  using Error::Error;
};

class PreparedKernel {
 public:
  /// Prepare `weight` with the selected kernel of `reg`, which the layer keeps (its plugin's load
  /// ends only when the layer and the registry are gone); throws nibble::Error with the plugin's
  /// message.
  PreparedKernel(std::shared_ptr<const Registry> reg, const Selection& sel,
                 const nibble_layer_desc& desc, const nibble_weight_input& weight, std::string part,
                 int threads);
  PreparedKernel(const PreparedKernel&) = delete;
  PreparedKernel& operator=(const PreparedKernel&) = delete;

  /// Validate the tensors against the layer and its device and run the kernel, queued on
  /// `stream` for a device kernel (which returns once the work is queued).
  void forward(const DLTensor& x, DLTensor& y, const DLTensor* ids = nullptr,
               const DLTensor* weights = nullptr, void* stream = nullptr) const;
  /// The layer as described to the kernel (name owned here).
  const nibble_layer_desc& desc() const { return desc_; }
  /// Where it runs.
  const Placement& placement() const { return placement_; }
  /// Bytes the plugin holds (0 when its ABI minor has no prepared_bytes).
  size_t prepared_bytes() const;
  /// Where the kernel's tensors live: {kDLCPU, 0} for a CPU kernel, else its device type and the
  /// layer's device index.
  const DLDevice& device() const { return device_; }
  /// The backend's memory calls for device(); empty for a CPU kernel.
  const sdk::host::Device& device_memory() const { return device_memory_; }

 private:
  // First, so it is destroyed last: the weight is released before its plugin's load can end.
  std::shared_ptr<const Registry> registry_;
  const nibble_kernel* kernel_;
  DLDevice device_{kDLCPU, 0};
  sdk::host::Device device_memory_;
  sdk::host::Prepared prepared_;
  nibble_layer_desc desc_{};
  std::string name_;
  Placement placement_;
  int threads_;
};

/// Prepare with the selected kernel, moving on to sel.later's candidates while prepare answers
/// UNSUPPORTED; each refusal is recorded in the placement's passed_over.
std::shared_ptr<const PreparedKernel> prepare_first_that_accepts(
    const std::shared_ptr<const Registry>& reg, Selection sel, const nibble_layer_desc& desc,
    const nibble_weight_input& weight, const std::string& part, int threads);

/// Check that tensor `t` (`what` names it) lives where a kernel on `device` reads it: any host
/// memory for the CPU, else exactly that device.
void check_device(const DLTensor& t, const char* what, const DLDevice& device,
                  const std::string& layer);

/// Check a 2-D activation tensor (x or y) on `device` and return its row count; `what` names it.
int64_t check_activation(const DLTensor& t, const char* what, int64_t cols,
                         const std::string& layer, const DLDevice& device);

}  // namespace nibble
