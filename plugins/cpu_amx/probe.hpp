// What this CPU and OS let cpu_amx use, and which ISA level the kernels run at. Compiled without
// ISA flags (probe.cpp): nothing here may execute an instruction the CPU might lack.
#pragma once

#include <string>

namespace nibble::cpu_amx {

/// The instruction-set levels the kernels are written for, lowest first.
enum class IsaLevel { scalar = 0, avx2 = 1, avx512 = 2, amx = 3 };

/// "scalar", "avx2", "avx512" or "amx".
const char* isa_name(IsaLevel level);

/// What the hardware and the OS offer (detected once per process).
struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512vnni = false, avx512bf16 = false;
  bool amx_tile = false, amx_bf16 = false, amx_int8 = false;
  bool os_avx = false;               ///< XCR0 enables the YMM state
  bool os_avx512 = false;            ///< XCR0 enables the opmask and ZMM states
  bool os_amx = false;               ///< XCR0 enables XTILECFG and XTILEDATA
  bool amx_permission = false;       ///< arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA) succeeded
  std::string amx_permission_error;  ///< why the request failed, when it did
};

/// The features of this machine. The first call also asks the kernel for AMX permission (once per
/// process, before any worker thread of this plugin starts).
const CpuFeatures& cpu_features();

/// The ISA level and how it was decided, re-read on every call (NIBBLE_MAX_ISA may change
/// between calls, e.g. in tests).
struct IsaDecision {
  IsaLevel hardware = IsaLevel::scalar;  ///< the best level the CPU and OS support
  IsaLevel level = IsaLevel::scalar;     ///< the level in use after NIBBLE_MAX_ISA
  bool capped = false;                   ///< NIBBLE_MAX_ISA lowered it
  std::string env_note;                  ///< about NIBBLE_MAX_ISA, when set
};

/// Decide the ISA level now from the hardware and NIBBLE_MAX_ISA.
IsaDecision decide_isa();

/// The probe's text: the level in use, what was found, the AMX permission and any cap.
std::string describe(const IsaDecision& d, const CpuFeatures& f);

}  // namespace nibble::cpu_amx
