// npu_ref: the Ascend weight-quant layout and numerics in portable C++
// (docs/backends-reference.md#npu_ref-the-ascend-antiquant-layout), as a reference backend that
// runs anywhere. Registration and probe.
#include <nibble/sdk/plugin.hpp>

#include <oneapi/tbb/global_control.h>

#include <memory>
#include <new>
#include <string>
#include <vector>

#include "kernels.hpp"

namespace nibble::npu_ref {

/// The npu_ref backend.
class NpuRefBackend : public sdk::Backend {
 public:
  static constexpr const char* name = "npu_ref";
  static constexpr const char* version = "1.0.0";
  static constexpr const char* vendor = "nibble";
  static constexpr const char* description =
      "Ascend weight-quant layout and numerics (centred int4/int8, antiquant offset and scale, "
      "fp32 accumulation) in portable C++; a reference, not an NPU driver";

  sdk::Probe probe() override {
    sdk::Probe p{true, 0, ""};
    p.detail =
        "portable C++ reference of the Ascend antiquant layout: available on every "
        "host, no NPU needed; up to ";
    p.detail += std::to_string(sdk::Host::thread_budget());
    p.detail += " threads (oneTBB)";
    return p;
  }
  std::vector<std::unique_ptr<sdk::Kernel>> make_kernels() override {
    std::vector<std::unique_ptr<sdk::Kernel>> k;
    k.push_back(make_linear_kernel());
    k.push_back(make_dense_kernel());
    k.push_back(make_moe_kernel());
    return k;
  }
  void shutdown() override {
    // Joins oneTBB's workers when nothing else in the process still holds the scheduler.
    tbb::task_scheduler_handle handle{tbb::attach{}};
    if (!tbb::finalize(handle, std::nothrow))
      sdk::Host::log(NIBBLE_LOG_DEBUG, "oneTBB workers stay: the scheduler is shared in-process");
  }
};

}  // namespace nibble::npu_ref

NIBBLE_PLUGIN(nibble::npu_ref::NpuRefBackend)
