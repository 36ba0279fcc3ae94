// The cuda backend: GPTQ/AWQ quantized linear layers on the Marlin layout (small-M streaming and
// large-M tiled tensor-core kernels), a general fallback layout for every other valid weight,
// cuBLAS for dense layers, and a fused MoE. Registration and probe.
#include <nibble/sdk/plugin.hpp>

#include <memory>
#include <string>
#include <vector>

#include "device_memory.hpp"
#include "kernels.hpp"
#include "probe.hpp"
#include "stream_scratch.hpp"

namespace nibble::cuda {

/// The cuda backend.
class CudaBackend : public sdk::Backend {
 public:
  static constexpr const char* name = "cuda";
  static constexpr const char* version = "1.0.0";
  static constexpr const char* vendor = "nibble";
  static constexpr const char* description =
      "NVIDIA GPUs (sm_90+): GPTQ/AWQ linear and MoE on the Marlin layout with tensor cores, a "
      "general layout for the rest, cuBLAS for dense layers";

  CudaBackend() { retain_scratch_pools(); }

  sdk::Probe probe() override {
    const ProbeResult r = probe_devices();
    sdk::Probe p;
    p.available = r.available;
    p.reasons = r.available ? 0
                            : (r.device_absent ? NIBBLE_PROBE_DEVICE_ABSENT
                                               : NIBBLE_PROBE_DEPENDENCY_MISSING);
    p.detail = r.detail;
    return p;
  }
  std::vector<std::unique_ptr<sdk::Kernel>> make_kernels() override {
    std::vector<std::unique_ptr<sdk::Kernel>> k;
    k.push_back(make_marlin_linear(cublas_));
    k.push_back(make_general_linear());
    k.push_back(make_dense(cublas_));
    k.push_back(make_marlin_moe());
    return k;
  }
  sdk::DeviceMemory* device_memory() override { return &memory_; }
  void shutdown() override {
    cublas_->clear();
    if (!released_) release_scratch_pools();  // once per load, however often a host calls this
    released_ = true;
  }

 private:
  CudaDeviceMemory memory_;
  std::shared_ptr<CublasPool> cublas_ = std::make_shared<CublasPool>();
  bool released_ = false;
};

}  // namespace nibble::cuda

NIBBLE_PLUGIN(nibble::cuda::CudaBackend)
