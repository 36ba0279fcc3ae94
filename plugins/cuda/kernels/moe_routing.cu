// MoE routing on the device: the (token, slot) pairs counted and grouped by expert in one block
// (counters in shared memory), cut into work items of at most 8 or 16 rows for the Marlin kernel;
// and the combine that sums each token's weighted expert outputs in slot order.
#include "element_access.cuh"
#include "launch.hpp"

namespace nibble::cuda {

namespace {

constexpr int kRouteThreads = 1024;

__device__ __forceinline__ int64_t id_at(const void* ids, bool int64, int64_t ld, int64_t m,
                                         int64_t j) {
  return int64 ? static_cast<const int64_t*>(ids)[m * ld + j]
               : int64_t(static_cast<const int32_t*>(ids)[m * ld + j]);
}

__global__ void __launch_bounds__(kRouteThreads) route_kernel(const RouteArgs a) {
  __shared__ int32_t count[kMaxRoutedExperts];
  __shared__ int32_t cursor[kMaxRoutedExperts];
  const int64_t pairs = a.M * a.top_k;
  for (int e = threadIdx.x; e < a.num_experts; e += kRouteThreads) count[e] = 0;
  __syncthreads();
  for (int64_t p = threadIdx.x; p < pairs; p += kRouteThreads) {
    const int64_t e = id_at(a.ids, a.ids_int64, a.ld_ids, p / a.top_k, p % a.top_k);
    if (e >= 0 && e < a.num_experts) atomicAdd(&count[e], 1);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int32_t offset = 0, items = 0;
    for (int e = 0; e < a.num_experts; ++e) {
      cursor[e] = offset;
      const int32_t most = a.item_rows;
      for (int32_t r = 0; r < count[e]; r += most)
        a.items[items++] = make_int4(e, offset + r, count[e] - r < most ? count[e] - r : most, 0);
      offset += count[e];
    }
    *a.item_count = items;
  }
  __syncthreads();
  for (int64_t p = threadIdx.x; p < pairs; p += kRouteThreads) {
    const int64_t e = id_at(a.ids, a.ids_int64, a.ld_ids, p / a.top_k, p % a.top_k);
    if (e >= 0 && e < a.num_experts) a.sorted[atomicAdd(&cursor[e], 1)] = int32_t(p);
  }
}

__global__ void combine_kernel(const CombineArgs a) {
  for (int64_t m = blockIdx.y; m < a.M; m += gridDim.y)
    for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < a.K;
         k += int64_t(gridDim.x) * blockDim.x) {
      float v = 0.f;
      for (int j = 0; j < a.top_k; ++j) {
        const int64_t e = id_at(a.ids, a.ids_int64, a.ld_ids, m, j);
        if (e < 0 || e >= a.num_experts) continue;
        v += device::load_act(a.weights, m * a.ld_weights + j, a.weights_dtype) *
             a.down[(m * a.top_k + j) * a.K + k];
      }
      device::store_out(a.y, m * a.ldy + k, a.y_dtype, v);
    }
}

}  // namespace

cudaError_t launch_route(const RouteArgs& a, cudaStream_t stream) {
  if (a.num_experts < 1 || a.num_experts > kMaxRoutedExperts || a.top_k < 1 || a.item_rows < 1 ||
      a.item_rows > 16)
    return cudaErrorInvalidValue;
  route_kernel<<<1, kRouteThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

cudaError_t launch_combine(const CombineArgs& a, cudaStream_t stream) {
  if (a.M == 0 || a.K == 0) return cudaSuccess;
  const int64_t x = (a.K + 255) / 256;
  const dim3 grid(unsigned(x < 32 ? x : 32), unsigned(a.M < 65535 ? a.M : 65535));
  combine_kernel<<<grid, 256, 0, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace nibble::cuda
