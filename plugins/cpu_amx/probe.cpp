// CPU feature detection: CPUID for what the core implements, XCR0 (xgetbv) for what the OS saves
// and restores, and arch_prctl for the AMX tile-data permission Linux requires before first use.
// Compiled without ISA flags on purpose: this file decides whether the others may run.
#include "probe.hpp"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace nibble::cpu_amx {
namespace {

constexpr int kArchGetXcompPerm = 0x1022;
constexpr int kArchReqXcompPerm = 0x1023;
constexpr int kXfeatureXtiledata = 18;

struct Regs {
  unsigned a = 0, b = 0, c = 0, d = 0;
};

Regs cpuid(unsigned leaf, unsigned sub) {
  Regs r;
  if (!__get_cpuid_count(leaf, sub, &r.a, &r.b, &r.c, &r.d)) r = Regs{};
  return r;
}

uint64_t xgetbv0() {
  uint32_t lo = 0, hi = 0;
  // xgetbv with ECX = 0 reads XCR0; only valid when CPUID says OSXSAVE.
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t(hi) << 32) | lo;
}

bool bit(unsigned v, int i) { return (v >> i) & 1u; }

CpuFeatures detect() {
  CpuFeatures f;
  unsigned max_leaf = __get_cpuid_max(0, nullptr);
  Regs l1 = cpuid(1, 0);
  bool osxsave = bit(l1.c, 27);
  f.fma = bit(l1.c, 12);
  f.f16c = bit(l1.c, 29);
  uint64_t xcr0 = osxsave ? xgetbv0() : 0;
  f.os_avx = (xcr0 & 0x6) == 0x6;                    // SSE + AVX state
  f.os_avx512 = f.os_avx && (xcr0 & 0xe0) == 0xe0;   // opmask, ZMM_Hi256, Hi16_ZMM
  f.os_amx = (xcr0 & (3ull << 17)) == (3ull << 17);  // XTILECFG + XTILEDATA
  if (max_leaf >= 7) {
    Regs l7 = cpuid(7, 0);
    f.avx2 = bit(l7.b, 5);
    f.avx512f = bit(l7.b, 16);
    f.avx512bw = bit(l7.b, 30);
    f.avx512vl = bit(l7.b, 31);
    f.avx512vnni = bit(l7.c, 11);
    f.amx_bf16 = bit(l7.d, 22);
    f.amx_tile = bit(l7.d, 24);
    f.amx_int8 = bit(l7.d, 25);
    if (l7.a >= 1) f.avx512bf16 = bit(cpuid(7, 1).a, 5);
  }
  if (f.amx_tile && f.os_amx) {
    // Permission is per process; asking again after a grant is harmless, but we ask only once.
    long rc = syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata);
    if (rc == 0) {
      unsigned long mask = 0;
      rc = syscall(SYS_arch_prctl, kArchGetXcompPerm, &mask);
      f.amx_permission = rc == 0 && ((mask >> kXfeatureXtiledata) & 1ul);
      if (!f.amx_permission) f.amx_permission_error = "ARCH_GET_XCOMP_PERM lacks XTILEDATA";
    } else {
      f.amx_permission_error = std::string("ARCH_REQ_XCOMP_PERM failed: ") + std::strerror(errno);
    }
  }
  return f;
}

IsaLevel hardware_level(const CpuFeatures& f) {
  // The AVX-512 kernels use BW/VL, VNNI (VPDPBUSD) and BF16 (VDPBF16PS).
  bool avx512 = f.os_avx512 && f.avx512f && f.avx512bw && f.avx512vl && f.avx512vnni &&
                f.avx512bf16 && f.fma && f.f16c;
  bool avx2 = f.os_avx && f.avx2 && f.fma && f.f16c;
  if (avx512 && f.amx_tile && f.amx_bf16 && f.amx_int8 && f.os_amx && f.amx_permission)
    return IsaLevel::amx;
#ifdef NIBBLE_AMX_EMULATION
  // The tile kernels run on software tiles (tile_emulation.hpp), which need only AVX-512.
  if (avx512) return IsaLevel::amx;
#endif
  if (avx512) return IsaLevel::avx512;
  if (avx2) return IsaLevel::avx2;
  return IsaLevel::scalar;
}

}  // namespace

const char* isa_name(IsaLevel level) {
  switch (level) {
    case IsaLevel::amx:
      return "amx";
    case IsaLevel::avx512:
      return "avx512";
    case IsaLevel::avx2:
      return "avx2";
    default:
      return "scalar";
  }
}

const CpuFeatures& cpu_features() {
  static CpuFeatures features;
  static std::once_flag once;
  std::call_once(once, [] { features = detect(); });
  return features;
}

IsaDecision decide_isa() {
  IsaDecision d;
  d.hardware = hardware_level(cpu_features());
  d.level = d.hardware;
  const char* env = std::getenv("NIBBLE_MAX_ISA");
  if (env && *env) {
    std::string v(env);
    IsaLevel cap;
    bool known = true;
    if (v == "scalar" || v == "portable")
      cap = IsaLevel::scalar;
    else if (v == "avx2")
      cap = IsaLevel::avx2;
    else if (v == "avx512")
      cap = IsaLevel::avx512;
    else if (v == "amx")
      cap = IsaLevel::amx;
    else
      known = false;
    if (!known) {
      d.env_note =
          "NIBBLE_MAX_ISA=" + v + " not understood (expected scalar|avx2|avx512|amx), ignored";
    } else if (cap < d.hardware) {
      d.level = cap;
      d.capped = true;
      d.env_note = std::string("capped from ") + isa_name(d.hardware) + " by NIBBLE_MAX_ISA=" + v;
    } else {
      d.env_note = "NIBBLE_MAX_ISA=" + v + " is not below the hardware level";
    }
  }
  return d;
}

std::string describe(const IsaDecision& d, const CpuFeatures& f) {
  std::string s = std::string("isa=") + isa_name(d.level) + "; found:";
  auto add = [&](bool have, const char* name) {
    if (have) s += std::string(" ") + name;
  };
  add(f.avx2 && f.os_avx, "avx2");
  add(f.fma, "fma");
  add(f.f16c, "f16c");
  add(f.avx512f && f.os_avx512, "avx512f");
  add(f.avx512bw && f.os_avx512, "avx512bw");
  add(f.avx512vl && f.os_avx512, "avx512vl");
  add(f.avx512vnni && f.os_avx512, "avx512-vnni");
  add(f.avx512bf16 && f.os_avx512, "avx512-bf16");
  add(f.amx_tile, "amx-tile");
  add(f.amx_bf16, "amx-bf16");
  add(f.amx_int8, "amx-int8");
  if (f.amx_tile) {
    if (!f.os_amx)
      s += "; AMX state not enabled by the OS (XCR0)";
    else if (f.amx_permission)
      s += "; AMX permission granted";
    else
      s += "; AMX permission refused (" + f.amx_permission_error + ")";
  } else {
    s += "; no AMX";
  }
#ifdef NIBBLE_AMX_EMULATION
  s += "; tile instructions emulated in software (a test build: slow)";
#endif
  if (!d.env_note.empty()) s += "; " + d.env_note;
  return s;
}

}  // namespace nibble::cpu_amx
