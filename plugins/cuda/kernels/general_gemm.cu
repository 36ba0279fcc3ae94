// The general kernel: every weight the Marlin layout cannot hold (any group size, groupings that
// do not fall on 16-row slabs, act-order with zero points, GPTQ v1's zero point 16) in a plain
// layout, computed in fp32 on the CUDA cores. A warp covers 32 consecutive outputs (coalesced
// word loads), the 8 warps of a block split K, and each thread keeps 8 rows of x in flight from
// shared memory; (q − z) · s is exact in fp32, so the only rounding is the fp32 accumulation.

#include "element_access.cuh"
#include "launch.hpp"

namespace nibble::cuda {

namespace {

constexpr int kWarps = 8;
constexpr int kRows = 8;      // rows of x per block
constexpr int kChunk = 1024;  // input channels of x staged in shared memory at a time

template <int BITS>
__global__ void __launch_bounds__(kWarps * 32) general_kernel(const GeneralArgs a) {
  constexpr int kPack = 32 / BITS;
  constexpr uint32_t kMask = (1u << BITS) - 1u;
  __shared__ float xs[kRows][kChunk];
  __shared__ float partial[kWarps][kRows][32];
  const GeneralDevice& w = a.w;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t n = int64_t(blockIdx.x) * 32 + lane;
  const int64_t m0 = int64_t(blockIdx.y) * kRows;
  const int rows = int(a.M - m0 < kRows ? a.M - m0 : kRows);
  float acc[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) acc[r] = 0.f;

  for (int64_t c0 = 0; c0 < w.K; c0 += kChunk) {
    const int width = int(w.K - c0 < kChunk ? w.K - c0 : kChunk);
    __syncthreads();
    for (int i = threadIdx.x; i < kRows * kChunk; i += kWarps * 32) {
      const int r = i / kChunk, c = i % kChunk;
      xs[r][c] =
          r < rows && c < width ? device::load_act(a.x, (m0 + r) * a.ldx + c0 + c, a.x_dtype) : 0.f;
    }
    __syncthreads();
    if (n >= w.N) continue;
    // Words of this chunk, dealt to the warps in turn (kChunk is a multiple of kPack).
    const int64_t word0 = c0 / kPack, words = (width + kPack - 1) / kPack;
    int64_t group = -1;
    float scale = 0.f, zero = 0.f;
    for (int64_t i = warp; i < words; i += kWarps) {
      const uint32_t word = __ldg(w.qweight + (word0 + i) * w.N + n);
#pragma unroll
      for (int j = 0; j < kPack; ++j) {
        const int c = int(i) * kPack + j;
        if (c >= width) break;
        const int64_t g = __ldg(w.groups + c0 + c);
        if (g != group) {
          group = g;
          scale = __ldg(w.scales + g * w.N + n);
          zero = float(__ldg(w.zeros + g * w.N + n));
        }
        const float wv = (float((word >> (BITS * j)) & kMask) - zero) * scale;
#pragma unroll
        for (int r = 0; r < kRows; ++r) acc[r] = fmaf(xs[r][c], wv, acc[r]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) partial[warp][r][lane] = acc[r];
  __syncthreads();
  for (int i = threadIdx.x; i < kRows * 32; i += kWarps * 32) {
    const int r = i / 32, l = i % 32;
    const int64_t col = int64_t(blockIdx.x) * 32 + l;
    if (r >= rows || col >= w.N) continue;
    float v = 0.f;
    for (int k = 0; k < kWarps; ++k) v += partial[k][r][l];
    if (a.bias) v += a.bias[col];
    device::store_out(a.y, (m0 + r) * a.ldy + col, a.x_dtype, v);
  }
}

}  // namespace

cudaError_t launch_general(const GeneralArgs& a, cudaStream_t stream) {
  if (a.w.bits != 4 && a.w.bits != 8) return cudaErrorInvalidValue;
  if (a.M == 0) return cudaSuccess;
  constexpr int64_t kMaxRows = 65535 * kRows;  // gridDim.y
  if (a.M > kMaxRows) {
    for (int64_t m = 0; m < a.M; m += kMaxRows) {
      GeneralArgs part = a;
      part.M = a.M - m < kMaxRows ? a.M - m : kMaxRows;
      part.x = static_cast<const char*>(a.x) + m * a.ldx * int64_t(dtype_size(a.x_dtype));
      part.y = static_cast<char*>(a.y) + m * a.ldy * int64_t(dtype_size(a.x_dtype));
      const cudaError_t e = launch_general(part, stream);
      if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
  }
  const dim3 grid(unsigned((a.w.N + 31) / 32), unsigned((a.M + kRows - 1) / kRows));
  if (a.w.bits == 4)
    general_kernel<4><<<grid, kWarps * 32, 0, stream>>>(a);
  else
    general_kernel<8><<<grid, kWarps * 32, 0, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace nibble::cuda
