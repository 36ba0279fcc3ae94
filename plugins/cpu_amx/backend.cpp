// The cpu_amx backend: the probe's answer and the kernel list. Compiled without ISA flags.
#include <nibble/sdk/plugin.hpp>

#include "linear_kernels.hpp"
#include "moe_kernel.hpp"
#include "probe.hpp"

namespace nibble::cpu_amx {

class CpuAmxBackend final : public sdk::Backend {
 public:
  static constexpr const char* name = "cpu_amx";
  static constexpr const char* version = "0.2.0";
  static constexpr const char* vendor = "nibble";
  static constexpr const char* description =
      "x86 CPUs: GPTQ/AWQ linear layers on AMX tiles, AVX-512, AVX2 or portable C++";

  // Always available (the portable path runs anywhere); the detail says which ISA is in use, and
  // the reason bits say why it is below AMX.
  sdk::Probe probe() override {
    const CpuFeatures& f = cpu_features();
    const IsaDecision d = decide_isa();
    sdk::Probe p;
    p.available = true;
    p.detail = describe(d, f);
    if (d.capped) p.reasons |= NIBBLE_PROBE_CAPPED_BY_USER;
    if (d.hardware < IsaLevel::amx) {
      if (!(f.amx_tile && f.amx_bf16 && f.amx_int8))
        p.reasons |= NIBBLE_PROBE_CPU_FEATURE_MISSING;
      else
        p.reasons |= NIBBLE_PROBE_OS_STATE_DISABLED;
    }
    return p;
  }

  // The host calls no kernel after this: join the worker pool and oneTBB's workers.
  void shutdown() override { release_threads(); }

  std::vector<std::unique_ptr<sdk::Kernel>> make_kernels() override {
    std::vector<std::unique_ptr<sdk::Kernel>> k;
    k.push_back(make_linear_a16_kernel());
    k.push_back(make_linear_a8_kernel());
    k.push_back(make_dense_onednn_f32_kernel());
    k.push_back(make_dense_onednn_kernel());
    k.push_back(make_moe_a16_kernel());
    k.push_back(make_moe_a8_kernel());
    return k;
  }
};

}  // namespace nibble::cpu_amx

NIBBLE_PLUGIN(nibble::cpu_amx::CpuAmxBackend)
