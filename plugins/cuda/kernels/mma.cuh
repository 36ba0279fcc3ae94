// Tensor-core building blocks of the Marlin kernels (sm_80+ PTX, run on sm_90): ldmatrix, the
// m16n8k16 MMA with fp32 accumulators, cp.async, streaming loads, and the dequantizers that turn
// one packed Marlin word into MMA B fragments holding exactly q − z (small integers are exact in
// f16 and bf16, so the only rounding of a weight is the scale, applied in fp32 or rounded once).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace nibble::cuda::device {

/// (a & b) | c in one LOP3.
__device__ __forceinline__ uint32_t and_or(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t d;
  asm volatile("lop3.b32 %0, %1, %2, %3, 0xEA;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

/// Four 8×8 b16 matrices from shared memory; lane l gives the address of row l % 16 of the
/// 16×16 tile, column half l / 16.
__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], const void* smem) {
  const uint32_t a = uint32_t(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

/// Two 8×8 b16 matrices from shared memory; lanes 0-15 give the addresses of their rows (lane l:
/// row l % 8 of matrix l / 8), the other lanes' addresses are not read.
__device__ __forceinline__ void ldmatrix_x2(uint32_t r[2], const void* smem) {
  const uint32_t a = uint32_t(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(a));
}

/// c += a · b for one m16n8k16 tile: A row-major 16×16, B column-major 16×8, fp32 accumulators.
template <class T>
__device__ __forceinline__ void mma(const uint32_t a[4], const uint32_t b[2], float c[4]);

template <>
__device__ __forceinline__ void mma<__half>(const uint32_t a[4], const uint32_t b[2], float c[4]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

template <>
__device__ __forceinline__ void mma<__nv_bfloat16>(const uint32_t a[4], const uint32_t b[2],
                                                   float c[4]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/// 16 bytes from global memory that is read once: not kept in L1.
__device__ __forceinline__ uint4 load_stream(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

/// Programmatic dependent launch (sm_90): lets the next kernel on the stream, when it was
/// launched with programmatic stream serialization, be launched before this one has finished
/// (once every block of this one has called this or exited).
__device__ __forceinline__ void allow_next_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

/// Waits until the kernels this one may overlap have finished and their writes are visible; a
/// no-op for a kernel launched without programmatic stream serialization.
__device__ __forceinline__ void wait_for_previous_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

/// This thread's arrival at the cluster barrier, without waiting (no memory ordering).
__device__ __forceinline__ void cluster_arrive() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
#endif
}

/// Waits until every thread of the cluster has arrived at the current barrier phase.
__device__ __forceinline__ void cluster_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
#endif
}

/// Asynchronous 16-byte copy global → shared; `bytes` < 16 zero-fills the rest (0: all zeros).
__device__ __forceinline__ void cp_async16(void* smem, const void* global, int bytes = 16) {
  const uint32_t s = uint32_t(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(global), "r"(bytes));
}
/// The same copy, also kept in L1 (for data that other blocks on the multiprocessor read too).
__device__ __forceinline__ void cp_async16_l1(void* smem, const void* global) {
  const uint32_t s = uint32_t(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(global));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
/// cp_async_wait<n>() for an n known only at run time (0-4; more waits as for 4).
__device__ __forceinline__ void cp_async_wait_upto(int n) {
  if (n <= 0)
    cp_async_wait<0>();
  else if (n == 1)
    cp_async_wait<1>();
  else if (n == 2)
    cp_async_wait<2>();
  else if (n == 3)
    cp_async_wait<3>();
  else
    cp_async_wait<4>();
}

/// The 16-bit MMA element types and their dequantization constants.
template <class T>
struct Bits16;
template <>
struct Bits16<__half> {
  /// 1024 in f16: 0x6400 | n is 1024 + n for n < 1024.
  static constexpr uint32_t kMagic = 0x6400;
  __device__ static uint32_t pair(float lo, float hi) {
    __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
  }
  __device__ static uint32_t sub(uint32_t a, uint32_t b) {
    __half2 r = __hsub2(*reinterpret_cast<__half2*>(&a), *reinterpret_cast<__half2*>(&b));
    return *reinterpret_cast<uint32_t*>(&r);
  }
  __device__ static uint32_t mul(uint32_t a, uint32_t b) {
    __half2 r = __hmul2(*reinterpret_cast<__half2*>(&a), *reinterpret_cast<__half2*>(&b));
    return *reinterpret_cast<uint32_t*>(&r);
  }
  __device__ static float2 to_float2(uint32_t a) {
    return __half22float2(*reinterpret_cast<__half2*>(&a));
  }
  __device__ static float to_float(uint16_t a) { return __half2float(__ushort_as_half(a)); }
  __device__ static uint16_t from_float(float v) { return __half_as_ushort(__float2half_rn(v)); }
};
template <>
struct Bits16<__nv_bfloat16> {
  /// 128 in bf16: 0x4300 | n is 128 + n for n < 128.
  static constexpr uint32_t kMagic = 0x4300;
  __device__ static uint32_t pair(float lo, float hi) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
  }
  __device__ static uint32_t sub(uint32_t a, uint32_t b) {
    __nv_bfloat162 r =
        __hsub2(*reinterpret_cast<__nv_bfloat162*>(&a), *reinterpret_cast<__nv_bfloat162*>(&b));
    return *reinterpret_cast<uint32_t*>(&r);
  }
  __device__ static uint32_t mul(uint32_t a, uint32_t b) {
    __nv_bfloat162 r =
        __hmul2(*reinterpret_cast<__nv_bfloat162*>(&a), *reinterpret_cast<__nv_bfloat162*>(&b));
    return *reinterpret_cast<uint32_t*>(&r);
  }
  __device__ static float2 to_float2(uint32_t a) {
    return __bfloat1622float2(*reinterpret_cast<__nv_bfloat162*>(&a));
  }
  __device__ static float to_float(uint16_t a) { return __bfloat162float(__ushort_as_bfloat16(a)); }
  __device__ static uint16_t from_float(float v) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(v));
  }
};

/// The zero point of one B column as the dequantizer subtracts it: a pair (M + z, M + z) in the
/// MMA type for the magic-number paths, or M + z as fp32 bits for 8-bit bf16.
template <class T, int BITS>
__device__ __forceinline__ uint32_t zero_operand(int z) {
  if constexpr (BITS == 8 && sizeof(T) == 2 && Bits16<T>::kMagic == 0x4300) {
    return __float_as_uint(8388608.f + float(z));
  } else {
    const uint32_t h = Bits16<T>::kMagic | uint32_t(z);
    return h | (h << 16);
  }
}

/// 4-bit: one word of a thread's Marlin fragment (nibbles f0 f2 f4 f6 f1 f3 f5 f7 of two n8
/// tiles) → the B registers of tile 2j (b0) and tile 2j+1 (b1), each exactly q − z.
template <class T>
__device__ __forceinline__ void dequant4(uint32_t q, uint32_t z0, uint32_t z1, uint32_t b0[2],
                                         uint32_t b1[2]) {
  constexpr uint32_t kMask = 0x000f000f, kEx = Bits16<T>::kMagic | (Bits16<T>::kMagic << 16);
  b0[0] = Bits16<T>::sub(and_or(q, kMask, kEx), z0);
  b0[1] = Bits16<T>::sub(and_or(q >> 4, kMask, kEx), z0);
  q >>= 8;
  b1[0] = Bits16<T>::sub(and_or(q, kMask, kEx), z1);
  b1[1] = Bits16<T>::sub(and_or(q >> 4, kMask, kEx), z1);
}

/// 8-bit: one word (bytes f0 f2 f1 f3 of one n8 tile) → that tile's B registers, exactly q − z.
template <class T>
__device__ __forceinline__ void dequant8(uint32_t q, uint32_t z, uint32_t b[2]) {
  if constexpr (Bits16<T>::kMagic == 0x6400) {
    b[0] = Bits16<T>::sub(__byte_perm(q, 0x64646464, 0x4240), z);
    b[1] = Bits16<T>::sub(__byte_perm(q, 0x64646464, 0x4341), z);
  } else {
    // bf16 has 8 mantissa bits: 128 + q does not fit, so go through fp32 (2^23 + q).
    const float zf = __uint_as_float(z);
    const float f0 = __uint_as_float(__byte_perm(q, 0x4B000000, 0x7650)) - zf;
    const float f1 = __uint_as_float(__byte_perm(q, 0x4B000000, 0x7651)) - zf;
    const float f2 = __uint_as_float(__byte_perm(q, 0x4B000000, 0x7652)) - zf;
    const float f3 = __uint_as_float(__byte_perm(q, 0x4B000000, 0x7653)) - zf;
    b[0] = Bits16<T>::pair(f0, f2);
    b[1] = Bits16<T>::pair(f1, f3);
  }
}

/// The inverse of Marlin's zero-point interleave: n8 tile t of a thread's 8 columns sits in
/// slot kZeroSlot4[t] of its 4-bit zero word, and in word t / 4, slot kZeroSlot8[t % 4] (8-bit).
__device__ __forceinline__ int zero_slot4(int t) { return (t & 1) * 4 + (t >> 1); }
__device__ __forceinline__ int zero_slot8(int t) { return (t & 1) * 2 + (t >> 1); }

}  // namespace nibble::cuda::device
