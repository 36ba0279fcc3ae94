// Elementwise helpers of the dense path: widen a matrix to fp32, and round an fp32 result plus
// its bias to the output dtype once.

#include "element_access.cuh"
#include "launch.hpp"

namespace nibble::cuda {

namespace {

__global__ void to_f32_kernel(const void* src, int64_t ld_src, DType t, float* dst, int64_t ld_dst,
                              int64_t rows, int64_t cols) {
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y)
    for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < cols;
         c += int64_t(gridDim.x) * blockDim.x)
      dst[r * ld_dst + c] = device::load_act(src, r * ld_src + c, t);
}

__global__ void finish_kernel(const float* src, int64_t ld_src, const float* bias, void* dst,
                              int64_t ld_dst, DType t, int64_t rows, int64_t cols) {
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y)
    for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < cols;
         c += int64_t(gridDim.x) * blockDim.x)
      device::store_out(dst, r * ld_dst + c, t, src[r * ld_src + c] + (bias ? bias[c] : 0.f));
}

dim3 grid_for(int64_t rows, int64_t cols) {
  const int64_t x = (cols + 255) / 256;
  return dim3(unsigned(x < 64 ? x : 64), unsigned(rows < 65535 ? rows : 65535));
}

}  // namespace

cudaError_t launch_to_f32(const void* src, int64_t ld_src, DType src_dtype, float* dst,
                          int64_t ld_dst, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  to_f32_kernel<<<grid_for(rows, cols), 256, 0, stream>>>(src, ld_src, src_dtype, dst, ld_dst, rows,
                                                          cols);
  return cudaGetLastError();
}

cudaError_t launch_finish(const float* src, int64_t ld_src, const float* bias, void* dst,
                          int64_t ld_dst, DType dst_dtype, int64_t rows, int64_t cols,
                          cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  finish_kernel<<<grid_for(rows, cols), 256, 0, stream>>>(src, ld_src, bias, dst, ld_dst, dst_dtype,
                                                          rows, cols);
  return cudaGetLastError();
}

}  // namespace nibble::cuda
