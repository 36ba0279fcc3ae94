// What a lane of the Marlin kernels reads besides its weight words: the scales it applies to its
// accumulators and the zero points its dequantizer subtracts, both in Marlin's permuted layouts;
// element access comes from element_access.cuh.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <atomic>
#include <cstdint>

#include "element_access.cuh"
#include "launch.hpp"
#include "mma.cuh"
#include "small_divisor.hpp"

namespace nibble::cuda::device {

__device__ __forceinline__ float half_value(uint32_t pair, DType t, int high) {
  const uint16_t v = uint16_t(high ? pair >> 16 : pair & 0xFFFF);
  return t == DType::f16 ? Bits16<__half>::to_float(v) : Bits16<__nv_bfloat16>::to_float(v);
}

// The 16 scales one lane applies per group: even(T) for column 8T + 2t of n8 tile T, odd(T) for
// column 8T + 2t + 1. Grouped scales (scale_perm) hold them as 16 contiguous values at 16t, all
// even columns first; per-channel ones (scale_perm_single) as 8 at 8t and 8 at 32 + 8t, even and
// odd alternating. 16-bit scales are loaded once per group and rearranged into one register per
// tile, (even, odd), widened exactly to fp32 when applied; fp32 scales are read when applied.
struct LaneScales {
  uint32_t pairs[8];
  const float* f32 = nullptr;
  int64_t first = 0, second = 0;
  bool single = false;
  bool bf16 = false;

  __device__ void load(const MarlinDevice& w, const void* scales, int64_t g, int64_t n_run, int t) {
    const int64_t row = g * w.N + n_run;
    single = w.single_group;
    first = single ? row + 8 * t : row + 16 * t;
    second = single ? row + 32 + 8 * t : row + 16 * t + 8;
    if (w.scale_dtype == DType::f32) {
      f32 = static_cast<const float*>(scales);
      return;
    }
    bf16 = w.scale_dtype == DType::bf16;
    const uint16_t* base = static_cast<const uint16_t*>(scales);
    const uint4 a = __ldg(reinterpret_cast<const uint4*>(base + first));
    const uint4 b = __ldg(reinterpret_cast<const uint4*>(base + second));
    if (single) {  // already (even T, odd T) per word
      pairs[0] = a.x, pairs[1] = a.y, pairs[2] = a.z, pairs[3] = a.w;
      pairs[4] = b.x, pairs[5] = b.y, pairs[6] = b.z, pairs[7] = b.w;
    } else {  // a holds the even columns, b the odd ones: interleave them
      const uint32_t ea[4] = {a.x, a.y, a.z, a.w}, ob[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        pairs[2 * i] = __byte_perm(ea[i], ob[i], 0x5410);
        pairs[2 * i + 1] = __byte_perm(ea[i], ob[i], 0x7632);
      }
    }
  }
  /// The scales of n8 tile T's even and odd column, as fp32.
  __device__ __forceinline__ float2 get(int T) const { return f32 ? get_f32(T) : get_16(T); }
  /// get() for fp32 scales (read when applied).
  __device__ __forceinline__ float2 get_f32(int T) const {
    const int e = single ? 2 * T : T, o = single ? 2 * T + 1 : 8 + T;
    return make_float2(__ldg(f32 + (e < 8 ? first + e : second + e - 8)),
                       __ldg(f32 + (o < 8 ? first + o : second + o - 8)));
  }
  /// get() for 16-bit scales (loaded per group).
  __device__ __forceinline__ float2 get_16(int T) const {
    const uint32_t p = pairs[T];
    if (bf16) return make_float2(__uint_as_float(p << 16), __uint_as_float(p & 0xFFFF0000u));
    return __half22float2(*reinterpret_cast<const __half2*>(&p));
  }
};

// The 8 scales one lane applies per group when the weight is the MMA's A operand (the small-M
// kernel at up to 8 rows): lane l holds output channel 8T + l / 4 of every n8 tile T, so its
// scales are the 8 channels {8T + l / 4}. Grouped scales (scale_perm) hold them as 8 contiguous
// values at 8 · (l / 4); per-channel ones (scale_perm_single) at stride 2 in two runs of 32.
// 16-bit scales are loaded once per group as one register per tile pair (2j, 2j + 1) and widened
// exactly to fp32 when applied; fp32 scales are read when applied.
struct ChannelScales {
  uint32_t pairs[4];
  const float* f32 = nullptr;
  int64_t row = 0;
  int g = 0;
  bool single = false;
  bool bf16 = false;

  __device__ void load(const MarlinDevice& w, const void* scales, int64_t group, int64_t n_run,
                       int lane_g) {
    row = group * w.N + n_run;
    g = lane_g;
    single = w.single_group;
    if (w.scale_dtype == DType::f32) {
      f32 = static_cast<const float*>(scales);
      return;
    }
    bf16 = w.scale_dtype == DType::bf16;
    const uint16_t* base = static_cast<const uint16_t*>(scales) + row;
    if (!single) {
      const uint4 a = __ldg(reinterpret_cast<const uint4*>(base + 8 * g));
      pairs[0] = a.x, pairs[1] = a.y, pairs[2] = a.z, pairs[3] = a.w;
    } else {  // tiles 0-3 in the first run of 32, 4-7 in the second; even or odd slot by g
      const uint4 u = __ldg(reinterpret_cast<const uint4*>(base + 8 * (g / 2)));
      const uint4 v = __ldg(reinterpret_cast<const uint4*>(base + 32 + 8 * (g / 2)));
      const uint32_t sel = (g & 1) ? 0x7632 : 0x5410;
      pairs[0] = __byte_perm(u.x, u.y, sel), pairs[1] = __byte_perm(u.z, u.w, sel);
      pairs[2] = __byte_perm(v.x, v.y, sel), pairs[3] = __byte_perm(v.z, v.w, sel);
    }
  }
  /// Where the scale of tile T's channel of this lane sits.
  __device__ __forceinline__ int64_t index(int T) const {
    return single ? row + (T >= 4 ? 32 : 0) + 8 * (g / 2) + 2 * (T & 3) + (g & 1) : row + 8 * g + T;
  }
  /// The scales of tiles 2j and 2j + 1 (the A rows g and g + 8 of m16 tile j), fp32 scales.
  __device__ __forceinline__ float2 get_f32(int j) const {
    return make_float2(__ldg(f32 + index(2 * j)), __ldg(f32 + index(2 * j + 1)));
  }
  /// The same for 16-bit scales (loaded per group).
  __device__ __forceinline__ float2 get_16(int j) const {
    const uint32_t p = pairs[j];
    if (bf16) return make_float2(__uint_as_float(p << 16), __uint_as_float(p & 0xFFFF0000u));
    return __half22float2(*reinterpret_cast<const __half2*>(&p));
  }
};

// The words of group g's zero points that the lane's 8 B columns (n8 tiles T = 0..7, column
// lane / 4) read: one word for 4-bit zero points, two for 8-bit. Loaded apart from their operands
// so that a kernel can load the next group's a group ahead.
template <int BITS>
struct ZeroWords {
  uint32_t word[BITS == 4 ? 1 : 2];
};

template <int BITS>
__device__ __forceinline__ ZeroWords<BITS> load_zero_words(const MarlinDevice& w,
                                                           const uint32_t* zeros, int64_t g,
                                                           int64_t n_run, int lane) {
  ZeroWords<BITS> z;
  const int i = lane / 4;
  if constexpr (BITS == 4) {
    z.word[0] = __ldg(zeros + g * (w.N / 8) + n_run / 8 + i);
  } else {
    const uint32_t* p = zeros + g * (w.N / 4) + n_run / 4 + 2 * i;
    z.word[0] = __ldg(p);
    z.word[1] = __ldg(p + 1);
  }
  return z;
}

// The zero operands of the lane's 8 B columns from their words.
template <class T, int BITS>
__device__ __forceinline__ void zeros_from_words(const ZeroWords<BITS>& z, uint32_t out[8]) {
  if constexpr (BITS == 4) {
#pragma unroll
    for (int t = 0; t < 8; ++t)
      out[t] = device::zero_operand<T, BITS>(int((z.word[0] >> (4 * device::zero_slot4(t))) & 15));
  } else {
#pragma unroll
    for (int t = 0; t < 8; ++t)
      out[t] = device::zero_operand<T, BITS>(
          int((z.word[t / 4] >> (8 * device::zero_slot8(t % 4))) & 255));
  }
}

// The zero operands of the lane's 8 B columns (n8 tiles T = 0..7, column lane / 4) for group g.
template <class T, int BITS>
__device__ __forceinline__ void load_zeros(const MarlinDevice& w, const uint32_t* zeros, int64_t g,
                                           int64_t n_run, int lane, uint32_t out[8]) {
  if (zeros == nullptr) {
#pragma unroll
    for (int t = 0; t < 8; ++t) out[t] = device::zero_operand<T, BITS>(1 << (BITS - 1));
    return;
  }
  zeros_from_words<T, BITS>(load_zero_words<BITS>(w, zeros, g, n_run, lane), out);
}

/// The group of slab s of a weight whose slab table is `table`.
__device__ __forceinline__ int64_t slab_group(const MarlinDevice& w, const int32_t* table,
                                              int64_t s) {
  return w.group_slabs ? int32_t(s) / w.group_slabs : int64_t(__ldg(table + s));
}

/// Sets the kernel's dynamic shared memory limit once per device (a per-launch call costs host
/// time on every forward).
template <auto Kernel>
cudaError_t allow_shared_memory(size_t bytes) {
  static std::atomic<uint64_t> done[64] = {};
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return e;
  std::atomic<uint64_t>& slot = done[dev % 64];
  if (slot.load(std::memory_order_relaxed) >= bytes) return cudaSuccess;
  e = cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes));
  if (e == cudaSuccess) {
    uint64_t seen = slot.load();
    while (seen < bytes && !slot.compare_exchange_weak(seen, bytes)) {
    }
  }
  return e;
}

/// Queues `kernel(args...)` on `grid` × `block` threads with `smem` bytes of dynamic shared memory,
/// in clusters of `cluster` blocks along x (an ordinary launch for 1).
template <class... Params, class... Args>
cudaError_t launch_clustered(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                             cudaStream_t stream, int cluster, Args... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = unsigned(cluster);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = cluster > 1 ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, kernel, args...);
}

// Split [0, n) into `parts` near-equal ranges; range `i`.
__device__ __forceinline__ void split(int64_t n, int parts, int i, int64_t& begin, int64_t& end) {
  begin = n * i / parts;
  end = n * (i + 1) / parts;
}

// split() in 32-bit arithmetic, for n · parts < 2^32 (a 64-bit division is a long subroutine);
// a power-of-two count of parts (the usual case) shifts instead of dividing.
__device__ __forceinline__ void split32(int n, int parts, int i, int& begin, int& end) {
  if ((parts & (parts - 1)) == 0) {
    const int shift = __ffs(parts) - 1;
    begin = int((unsigned(n) * unsigned(i)) >> shift);
    end = int((unsigned(n) * unsigned(i + 1)) >> shift);
    return;
  }
  begin = int(unsigned(n) * unsigned(i) / unsigned(parts));
  end = int(unsigned(n) * unsigned(i + 1) / unsigned(parts));
}

/// This block's cluster and its rank in it, for a launch whose clusters are `cluster` blocks laid
/// along x (1: no cluster): blockIdx.x / cluster and % cluster, read from the cluster's own
/// registers instead of divided.
__device__ __forceinline__ void cluster_place(int cluster, int& index, int& rank) {
  if (cluster == 1) {
    index = int(blockIdx.x), rank = 0;
    return;
  }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  uint32_t x, r;
  asm("mov.u32 %0, %%clusterid.x;\n" : "=r"(x));
  asm("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  index = int(x), rank = int(r);
#else
  index = int(blockIdx.x) / cluster, rank = int(blockIdx.x) % cluster;
#endif
}

}  // namespace nibble::cuda::device
