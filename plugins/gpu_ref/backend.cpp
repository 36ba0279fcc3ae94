// gpu_ref: the CUDA weight layouts (ExLlama's shuffle with q_perm, Marlin's tile repack and scale
// permutation) in portable C++, computing from the repacked words. Registration and probe.
#include <nibble/sdk/plugin.hpp>

#include <oneapi/tbb/global_control.h>

#include <memory>
#include <new>
#include <string>
#include <vector>

#include "kernels.hpp"

namespace nibble::gpu_ref {

/// The gpu_ref backend.
class GpuRefBackend : public sdk::Backend {
 public:
  static constexpr const char* name = "gpu_ref";
  static constexpr const char* version = "1.0.0";
  static constexpr const char* vendor = "nibble";
  static constexpr const char* description =
      "CUDA weight layouts (ExLlama shuffle + q_perm, Marlin tiles + scale permutation, AWQ via "
      "Marlin zero points) computed in portable C++ with fp32 accumulation; a reference, not a "
      "GPU driver";

  sdk::Probe probe() override {
    sdk::Probe p{true, 0, ""};
    p.detail =
        "portable C++ reference of the ExLlama and Marlin layouts: available on "
        "every host, no GPU needed; up to ";
    p.detail += std::to_string(sdk::Host::thread_budget());
    p.detail += " threads (oneTBB)";
    return p;
  }
  std::vector<std::unique_ptr<sdk::Kernel>> make_kernels() override {
    std::vector<std::unique_ptr<sdk::Kernel>> k;
    k.push_back(make_marlin_linear());
    k.push_back(make_exllama_linear());
    k.push_back(make_dense());
    k.push_back(make_marlin_moe());
    k.push_back(make_exllama_moe());
    return k;
  }
  void shutdown() override {
    // Joins oneTBB's workers when nothing else in the process still holds the scheduler.
    tbb::task_scheduler_handle handle{tbb::attach{}};
    if (!tbb::finalize(handle, std::nothrow))
      sdk::Host::log(NIBBLE_LOG_DEBUG, "oneTBB workers stay: the scheduler is shared in-process");
  }
};

}  // namespace nibble::gpu_ref

NIBBLE_PLUGIN(nibble::gpu_ref::GpuRefBackend)
