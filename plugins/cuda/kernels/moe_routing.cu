// MoE routing on the device: the (token, slot) pairs counted and grouped by expert in one block
// (counters in shared memory), cut into work items of at most 8 or 16 rows for the Marlin kernel;
// and the combine that sums each token's weighted expert outputs in slot order.
#include "element_access.cuh"
#include "launch.hpp"
#include "mma.cuh"

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
  // The gate/up kernel is launched while this one runs and waits for the items where it needs
  // them; the ids may be the previous kernel's output.
  device::allow_next_kernel();
  device::wait_for_previous_kernel();
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
  device::wait_for_previous_kernel();  // launched while the down projection runs
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

// Launched with programmatic stream serialization: the kernel may start while the previous one on
// the stream finishes (its launch latency hidden) and waits for it before it reads its input.
template <class Args>
cudaError_t launch_overlapping(void (*kernel)(Args), dim3 grid, dim3 block, cudaStream_t stream,
                               const Args& a) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.stream = stream;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  return cudaLaunchKernelEx(&cfg, kernel, a);
}

}  // namespace

cudaError_t launch_route(const RouteArgs& a, cudaStream_t stream) {
  if (a.num_experts < 1 || a.num_experts > kMaxRoutedExperts || a.top_k < 1 || a.item_rows < 1 ||
      a.item_rows > 16)
    return cudaErrorInvalidValue;
  return launch_overlapping(route_kernel, dim3(1), dim3(kRouteThreads), stream, a);
}

cudaError_t launch_combine(const CombineArgs& a, cudaStream_t stream) {
  if (a.M == 0 || a.K == 0) return cudaSuccess;
  const int64_t x = (a.K + 255) / 256;
  const dim3 grid(unsigned(x < 32 ? x : 32), unsigned(a.M < 65535 ? a.M : 65535));
  return launch_overlapping(combine_kernel, grid, dim3(256), stream, a);
}

}  // namespace nibble::cuda
