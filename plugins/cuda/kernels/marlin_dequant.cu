// The Marlin weight dequantized into a dense matrix for cuBLAS (the large-M path,
// dequant_gemm.cpp): each weight becomes (q − z)·s with the fp32 scale, rounded once to the
// activations' dtype — the tensor an f16 or bf16 model holds (docs/formats.md, scale precision: no
// scale is rounded). A warp takes one 64-wide run over kSlabsPerWarp consecutive 16-row slabs; each
// lane turns its 16-byte word of a slab into exact q − z pairs with the MMA kernels' dequantizer,
// so the (input, output) position of every value is the one those kernels give it: lane l holds
// output 8T + l / 4 of n8 tile T and inputs 2(l % 4) + {0, 1, 8, 9} of the slab.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "launch.hpp"
#include "marlin_lane.cuh"
#include "mma.cuh"

namespace nibble::cuda {

namespace {

constexpr int kWarps = 4, kThreads = 32 * kWarps;
constexpr int kSlabsPerWarp = 4;                 // 64 inputs
constexpr int kTileLd = kSlabsPerWarp * 16 + 8;  // a staged row: 64 inputs + 16 bytes of padding

// A warp's 64 outputs × 64 inputs, staged in shared memory so that global stores are whole
// 128-byte rows; the padding keeps both the lanes' 4-byte writes (output 8T + l / 4, inputs
// 2(l % 4) + 16j) and the 16-byte reads of a quarter warp (one row) free of bank conflicts.
template <class T>
struct alignas(16) StagedTile {  // rows are read back as 16-byte words
  T v[64][kTileLd];
};

template <class T, int BITS>
__global__ void __launch_bounds__(kThreads)
    marlin_dequant_kernel(const MarlinDevice w, int64_t n0, int64_t runs, T* dst, int64_t ld) {
  __shared__ StagedTile<T> staged[kWarps];
  constexpr int kWordsPerLane = BITS / 4;  // uint4 per lane per slab
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t slabs = w.K / 16;
  const int64_t slab_blocks = (slabs + kSlabsPerWarp - 1) / kSlabsPerWarp;
  const int64_t item = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (item >= slab_blocks * runs) return;
  // Consecutive warps take consecutive slabs of one run: their rows' writes are adjacent.
  const int64_t run = item / slab_blocks;
  const int64_t s0 = (item % slab_blocks) * kSlabsPerWarp;
  const int64_t n_run = n0 + run * 64;         // in the weight
  const int64_t slab_stride = w.N * BITS / 8;  // uint4 per slab row
  const uint4* qw =
      reinterpret_cast<const uint4*>(w.qweight) + (n_run / 64) * (8 * BITS) + lane * kWordsPerLane;
  uint4 words[kSlabsPerWarp][kWordsPerLane];
#pragma unroll
  for (int j = 0; j < kSlabsPerWarp; ++j)
#pragma unroll
    for (int i = 0; i < kWordsPerLane; ++i)
      words[j][i] = s0 + j < slabs ? device::load_stream(qw + (s0 + j) * slab_stride + i)
                                   : make_uint4(0, 0, 0, 0);
  const bool scattered = w.columns != nullptr;  // act-order: straight to each channel
  StagedTile<T>& tile = staged[threadIdx.x / 32];
  T* rows =
      dst + (run * 64 + g) * ld;  // the lane's output of n8 tile 0 (the run starts at row run · 64)
  int64_t group = -1;
  device::ChannelScales sc;
  uint32_t zop[8];
#pragma unroll
  for (int j = 0; j < kSlabsPerWarp; ++j) {
    const int64_t s = s0 + j;
    if (s >= slabs) break;
    const int64_t gs = device::slab_group(w, w.slab_groups, s);
    if (gs != group) {
      group = gs;
      sc.load(w, w.scales, group, n_run, g);
      device::load_zeros<T, BITS>(w, w.zeros, group, n_run, lane, zop);
    }
    // Inputs 2t, 2t + 1 (b[0]) and 2t + 8, 2t + 9 (b[1]) of slab s, output 8·tile + g of the run.
    auto emit = [&](int n8, const uint32_t b[2], float scale) {
      const float2 lo = device::Bits16<T>::to_float2(b[0]), hi = device::Bits16<T>::to_float2(b[1]);
      const uint32_t p0 = device::Bits16<T>::pair(lo.x * scale, lo.y * scale);
      const uint32_t p1 = device::Bits16<T>::pair(hi.x * scale, hi.y * scale);
      if (!scattered) {
        T* r = tile.v[8 * n8 + g] + 16 * j + 2 * t;
        *reinterpret_cast<uint32_t*>(r) = p0;
        *reinterpret_cast<uint32_t*>(r + 8) = p1;
      } else {
        uint16_t* r = reinterpret_cast<uint16_t*>(rows + int64_t(8 * n8) * ld);
        const int64_t k = s * 16 + 2 * t;
        r[__ldg(w.columns + k)] = uint16_t(p0 & 0xFFFF);
        r[__ldg(w.columns + k + 1)] = uint16_t(p0 >> 16);
        r[__ldg(w.columns + k + 8)] = uint16_t(p1 & 0xFFFF);
        r[__ldg(w.columns + k + 9)] = uint16_t(p1 >> 16);
      }
    };
    if constexpr (BITS == 4) {
      const uint32_t q[4] = {words[j][0].x, words[j][0].y, words[j][0].z, words[j][0].w};
#pragma unroll
      for (int p = 0; p < 4; ++p) {
        uint32_t b0[2], b1[2];
        device::dequant4<T>(q[p], zop[2 * p], zop[2 * p + 1], b0, b1);
        const float2 s2 = w.scale_dtype == DType::f32 ? sc.get_f32(p) : sc.get_16(p);
        emit(2 * p, b0, s2.x);
        emit(2 * p + 1, b1, s2.y);
      }
    } else {
      const uint32_t q[8] = {words[j][0].x, words[j][0].y, words[j][0].z, words[j][0].w,
                             words[j][1].x, words[j][1].y, words[j][1].z, words[j][1].w};
#pragma unroll
      for (int p = 0; p < 8; ++p) {
        uint32_t b[2];
        device::dequant8<T>(q[p], zop[p], b);
        const float2 s2 = w.scale_dtype == DType::f32 ? sc.get_f32(p / 2) : sc.get_16(p / 2);
        emit(p, b, p % 2 ? s2.y : s2.x);
      }
    }
  }
  if (scattered) return;
  __syncwarp();
  // 64 rows of up to 128 bytes: a quarter warp per row, 16 bytes per lane.
  const int64_t k0 = s0 * 16;
  const int64_t left = slabs - s0;
  const int valid = int(left < kSlabsPerWarp ? left : kSlabsPerWarp) * 16;  // inputs it made
  const int chunk = lane % 8;
  if (chunk * 8 < valid)
#pragma unroll 4
    for (int r = lane / 8; r < 64; r += 4)
      *reinterpret_cast<uint4*>(dst + (run * 64 + r) * ld + k0 + chunk * 8) =
          *reinterpret_cast<const uint4*>(tile.v[r] + chunk * 8);
}

template <class T, int BITS>
cudaError_t launch_typed(const MarlinDevice& w, int64_t n0, int64_t runs, void* dst, int64_t ld,
                         cudaStream_t stream) {
  const int64_t slab_blocks = (w.K / 16 + kSlabsPerWarp - 1) / kSlabsPerWarp;
  const int64_t blocks = (slab_blocks * runs + kWarps - 1) / kWarps;
  if (blocks > int64_t(INT32_MAX)) return cudaErrorInvalidValue;
  marlin_dequant_kernel<T, BITS>
      <<<unsigned(blocks), kThreads, 0, stream>>>(w, n0, runs, static_cast<T*>(dst), ld);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_marlin_dequant(const MarlinDevice& w, int64_t n0, int64_t n1, DType out,
                                  void* dst, int64_t ld, cudaStream_t stream) {
  if (w.K % 16 != 0 || w.N % 64 != 0 || n0 % 64 != 0 || n1 % 64 != 0 || n0 < 0 || n1 > w.N ||
      n0 > n1 || ld < w.K || out == DType::f32 ||
      (w.columns == nullptr && (ld % 8 != 0 || reinterpret_cast<uintptr_t>(dst) % 16 != 0)) ||
      (w.bits != 4 && w.bits != 8))
    return cudaErrorInvalidValue;
  if (n1 == n0 || w.K == 0) return cudaSuccess;
  const int64_t runs = (n1 - n0) / 64;
  const bool four = w.bits == 4;
  if (out == DType::f16)
    return four ? launch_typed<__half, 4>(w, n0, runs, dst, ld, stream)
                : launch_typed<__half, 8>(w, n0, runs, dst, ld, stream);
  return four ? launch_typed<__nv_bfloat16, 4>(w, n0, runs, dst, ld, stream)
              : launch_typed<__nv_bfloat16, 8>(w, n0, runs, dst, ld, stream);
}

}  // namespace nibble::cuda
