// Hopper's warpgroup MMA (sm_90a only): the shared-memory descriptor of a 128-byte-swizzled,
// K-major operand, the fences around asynchronous MMAs, and m64n128k16 with the A operand in
// registers and fp32 accumulators. Every function here compiles to nothing but a trap on other
// targets; callers check the device (compute capability 9.0) before they launch.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define NIBBLE_WGMMA 1
#else
#define NIBBLE_WGMMA 0
#endif

namespace nibble::cuda::device {

/// The descriptor of a K-major operand in shared memory whose rows are 128 bytes (64 16-bit
/// values), stored in 1024-byte atoms of 8 rows with 128-byte swizzling (16-byte chunk c of row r
/// at c ^ (r % 8)); `smem` must lie in an atom aligned to 1024 bytes, and may point 32·i bytes
/// into its rows for the i-th 16-value step of K.
__device__ __forceinline__ uint64_t swizzled_kmajor_desc(const void* smem) {
  const uint64_t addr = uint64_t(__cvta_generic_to_shared(smem));
  return ((addr & 0x3FFFF) >> 4)        // start address
         | (uint64_t(1) << 16)          // leading byte offset: unused by swizzled K-major layouts
         | (uint64_t(1024 >> 4) << 32)  // stride byte offset: from one 8-row atom to the next
         | (uint64_t(1) << 62);         // 128-byte swizzle
}

/// Lowers this warpgroup's registers per thread to N (a multiple of 8, 24..256), returning them
/// to the multiprocessor for setmaxnreg_inc; every warp of the warpgroup executes it.
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() {
#if NIBBLE_WGMMA
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
#endif
}

/// Raises this warpgroup's registers per thread to N, waiting until the multiprocessor has them.
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() {
#if NIBBLE_WGMMA
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
#endif
}

/// Orders this thread's earlier register writes (A fragments, accumulators) before the warpgroup
/// MMAs that follow.
__device__ __forceinline__ void wgmma_fence() {
#if NIBBLE_WGMMA
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}

/// Orders this thread's earlier generic writes to shared memory (cp.async copies it has waited
/// for, plain stores) before later reads by the asynchronous proxy that warpgroup MMAs read
/// through.
__device__ __forceinline__ void fence_proxy_async_shared() {
#if NIBBLE_WGMMA
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

/// Closes the group of warpgroup MMAs issued since the last commit.
__device__ __forceinline__ void wgmma_commit() {
#if NIBBLE_WGMMA
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}

/// Waits until at most N committed groups are still running.
template <int N>
__device__ __forceinline__ void wgmma_wait() {
#if NIBBLE_WGMMA
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}

/// Keeps the compiler from moving reads or writes of `r` across this point (accumulators of
/// MMAs that run asynchronously).
__device__ __forceinline__ void fence_register(float& r) { asm volatile("" : "+f"(r)::"memory"); }

/// d += A · B for a 64 × N × 16 step: A is this warpgroup's 64 × 16 tile in registers (warp w
/// holds rows 16w..16w + 15 as an m16n8k16 A fragment), B is N × 16 in shared memory (desc_b).
template <class T, int N>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const uint32_t (&a)[4],
                                         uint64_t desc_b);

// Accumulators d[i] .. d[i + 63] as read-write asm operands.
#define NIBBLE_WGMMA_ACC8(d, i)                                                               \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
      "+f"(d[i + 6]), "+f"(d[i + 7])
#define NIBBLE_WGMMA_ACC64(d, i)                                                                \
  NIBBLE_WGMMA_ACC8(d, i), NIBBLE_WGMMA_ACC8(d, i + 8), NIBBLE_WGMMA_ACC8(d, i + 16),           \
      NIBBLE_WGMMA_ACC8(d, i + 24), NIBBLE_WGMMA_ACC8(d, i + 32), NIBBLE_WGMMA_ACC8(d, i + 40), \
      NIBBLE_WGMMA_ACC8(d, i + 48), NIBBLE_WGMMA_ACC8(d, i + 56)

// The m64n128k16 MMA with A in registers for one 16-bit TYPE ("bf16" or "f16").
#define NIBBLE_WGMMA_M64N128K16_RS(TYPE)                                   \
  asm volatile(                                                            \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                         \
      "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE         \
      " "                                                                  \
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"            \
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"   \
      "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"   \
      "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, " \
      "{%64,%65,%66,%67}, %68, p, 1, 1, 0;\n}\n"                           \
      : NIBBLE_WGMMA_ACC64(d, 0)                                           \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1));

template <>
__device__ __forceinline__ void wgmma_rs<__nv_bfloat16, 128>(float (&d)[64], const uint32_t (&a)[4],
                                                             uint64_t desc_b) {
#if NIBBLE_WGMMA
  NIBBLE_WGMMA_M64N128K16_RS("bf16");
#else
  __trap();
#endif
}

template <>
__device__ __forceinline__ void wgmma_rs<__half, 128>(float (&d)[64], const uint32_t (&a)[4],
                                                      uint64_t desc_b) {
#if NIBBLE_WGMMA
  NIBBLE_WGMMA_M64N128K16_RS("f16");
#else
  __trap();
#endif
}

#undef NIBBLE_WGMMA_M64N128K16_RS

// The m64n256k16 MMA with A in registers: the same, 128 accumulators per thread.
#define NIBBLE_WGMMA_M64N256K16_RS(TYPE)                                                   \
  asm volatile(                                                                            \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"                                        \
      "wgmma.mma_async.sync.aligned.m64n256k16.f32." TYPE "." TYPE                         \
      " {"                                                                                 \
      "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"                             \
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"                   \
      "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"                   \
      "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,"                   \
      "%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,"                   \
      "%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,"                   \
      "%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,"       \
      "%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}, " \
      "{%128,%129,%130,%131}, %132, p, 1, 1, 0;\n}\n"                                      \
      : NIBBLE_WGMMA_ACC64(d, 0), NIBBLE_WGMMA_ACC64(d, 64)                                \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1));

template <>
__device__ __forceinline__ void wgmma_rs<__nv_bfloat16, 256>(float (&d)[128],
                                                             const uint32_t (&a)[4],
                                                             uint64_t desc_b) {
#if NIBBLE_WGMMA
  NIBBLE_WGMMA_M64N256K16_RS("bf16");
#else
  __trap();
#endif
}

template <>
__device__ __forceinline__ void wgmma_rs<__half, 256>(float (&d)[128], const uint32_t (&a)[4],
                                                      uint64_t desc_b) {
#if NIBBLE_WGMMA
  NIBBLE_WGMMA_M64N256K16_RS("f16");
#else
  __trap();
#endif
}

#undef NIBBLE_WGMMA_M64N256K16_RS
#undef NIBBLE_WGMMA_ACC64
#undef NIBBLE_WGMMA_ACC8

}  // namespace nibble::cuda::device
