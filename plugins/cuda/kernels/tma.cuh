// Hopper's asynchronous copies with transaction barriers (sm_90): shared-memory mbarriers, bulk
// copies of contiguous bytes and tensor-map (TMA) copies of 2-D boxes, each completing on an
// mbarrier that counts its bytes. Every function compiles to nothing but a trap below sm_90;
// callers check the device before they launch.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace nibble::cuda::device {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define NIBBLE_TMA 1
#else
#define NIBBLE_TMA 0
#endif

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return uint32_t(__cvta_generic_to_shared(p));
}

/// Sets up the barrier for `count` arrivals per phase (one thread, before any other use).
__device__ __forceinline__ void mbarrier_init(uint64_t* bar, uint32_t count) {
#if NIBBLE_TMA
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(shared_address(bar)), "r"(count)
               : "memory");
#else
  __trap();
#endif
}

/// Makes the initialized barriers visible to the asynchronous proxy (the copies that complete on
/// them); a block barrier must follow before other threads use them.
__device__ __forceinline__ void fence_mbarrier_init() {
#if NIBBLE_TMA
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}

/// One arrival that also announces `bytes` of copies that will complete on this phase.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
#if NIBBLE_TMA
  asm volatile(
      "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(shared_address(bar)),
      "r"(bytes)
      : "memory");
#else
  __trap();
#endif
}

/// One arrival (release: this thread's earlier reads and writes happen before the phase ends).
__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) {
#if NIBBLE_TMA
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(shared_address(bar)) : "memory");
#else
  __trap();
#endif
}

/// Waits until the phase of parity `parity` has completed (acquire: the copies that completed on
/// it are visible).
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, uint32_t parity) {
#if NIBBLE_TMA
  asm volatile(
      "{\n.reg .pred p;\n"
      "WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      "@!p bra WAIT;\n}\n" ::"r"(shared_address(bar)),
      "r"(parity)
      : "memory");
#else
  __trap();
#endif
}

/// Copies `bytes` (a multiple of 16, both addresses 16-byte aligned) from global to this block's
/// shared memory, completing on `bar`.
__device__ __forceinline__ void bulk_copy(void* smem, const void* global, uint32_t bytes,
                                          uint64_t* bar) {
#if NIBBLE_TMA
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::
          "r"(shared_address(smem)),
      "l"(global), "r"(bytes), "r"(shared_address(bar))
      : "memory");
#else
  __trap();
#endif
}

/// Copies the box of `map` at coordinates (c0 innermost, c1) to this block's shared memory in the
/// map's swizzled layout, completing on `bar` (parts of the box outside the tensor read zeros).
__device__ __forceinline__ void tensor_copy_2d(void* smem, const CUtensorMap* map, int c0, int c1,
                                               uint64_t* bar) {
#if NIBBLE_TMA
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, "
      "%3}], [%4];\n" ::"r"(shared_address(smem)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(shared_address(bar))
      : "memory");
#else
  __trap();
#endif
}

}  // namespace nibble::cuda::device
