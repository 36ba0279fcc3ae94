// Element access to activation, output and routing arrays of any of the three float dtypes, for
// every kernel of the backend.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "launch.hpp"

namespace nibble::cuda::device {

/// Element i of an array of dtype t, as fp32.
__device__ __forceinline__ float load_act(const void* p, int64_t i, DType t) {
  if (t == DType::f32) return static_cast<const float*>(p)[i];
  const uint16_t v = static_cast<const uint16_t*>(p)[i];
  return t == DType::f16 ? __half2float(__ushort_as_half(v))
                         : __bfloat162float(__ushort_as_bfloat16(v));
}

/// Store v rounded to dtype t at element i.
__device__ __forceinline__ void store_out(void* p, int64_t i, DType t, float v) {
  if (t == DType::f32)
    static_cast<float*>(p)[i] = v;
  else if (t == DType::f16)
    static_cast<uint16_t*>(p)[i] = __half_as_ushort(__float2half_rn(v));
  else
    static_cast<uint16_t*>(p)[i] = __bfloat16_as_ushort(__float2bfloat16_rn(v));
}

}  // namespace nibble::cuda::device
