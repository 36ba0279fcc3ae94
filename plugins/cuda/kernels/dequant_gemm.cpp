// The large-M path: dequantize a share of the outputs, multiply it with cuBLAS, next share.
#include "dequant_gemm.hpp"

#include <algorithm>
#include <climits>

namespace nibble::cuda {

namespace {

cudaDataType_t cuda_type(DType t) {
  return t == DType::f32 ? CUDA_R_32F : t == DType::f16 ? CUDA_R_16F : CUDA_R_16BF;
}

// The most scratch one call's dequantized weight takes; a larger weight is cut into equal shares.
// The fp32 sums of a call with a bias take at most as much again, in blocks of rows.
constexpr int64_t kMostWeightBytes = int64_t(256) << 20;
constexpr int64_t kMostSumBytes = int64_t(256) << 20;

}  // namespace

int64_t dequant_gemm_rows(int64_t K, int64_t N) { return K * N >= (int64_t(1) << 24) ? 49 : 65; }

// The warpgroup-MMA kernel's rows: all up to kWgmmaMostRows (H200, six shapes: it ties or wins
// at 512), and up to kWgmmaOneWaveRows where its 256-row blocks all fit at once and K is long
// enough (kWgmmaOneWaveK) to amortize a block's start and finish. At 1024 rows on the H200 it won
// on 4096×4096 (59.5 against 63.3 µs), 14336×4096 (192.9 against 223.6) and 8192×2048 (62.1
// against 64.2), each one wave; lost on 2048×2048 (one wave but 32 stages: 23.2 against 22.1) and
// on 4096×14336 (3.4 waves: 234.6 against 230.9); at 2048 rows it lost on every shape
// (docs/cuda.md, "Large M on the warpgroup MMA").
constexpr int64_t kWgmmaMostRows = 512, kWgmmaOneWaveRows = 1024, kWgmmaOneWaveK = 4096;

LargeM choose_large_m(const GemmArgs& a, const WgmmaFit* wgmma, bool f16_fits) {
  if (a.M < dequant_gemm_rows(a.w.K, a.w.N) || (a.x_dtype == DType::f16 && !f16_fits))
    return LargeM::none;
  const bool one_wave = wgmma && a.M <= kWgmmaOneWaveRows && a.w.K >= kWgmmaOneWaveK &&
                        (a.w.N + 127) / 128 * ((a.M + 255) / 256) <= wgmma->clusters[1];
  if (wgmma && (a.M <= kWgmmaMostRows || one_wave) && wgmma_takes(a)) return LargeM::wgmma;
  return dequant_gemm_takes(a) ? LargeM::dequant_gemm : LargeM::none;
}

bool dequant_gemm_takes(const GemmArgs& a) {
  return a.items == nullptr && a.epilogue == Epilogue::store && a.x_dtype != DType::f32 &&
         a.y_dtype == a.x_dtype && a.w.K % 16 == 0 && a.w.N % 64 == 0 && a.w.K <= INT_MAX &&
         a.w.N <= INT_MAX && a.M <= INT_MAX && a.ldx <= INT_MAX && a.ldy <= INT_MAX &&
         (a.w.bits == 4 || a.w.bits == 8);
}

DequantGemmPlan plan_dequant_gemm(const GemmArgs& a, int64_t chunk_cols, int64_t sum_rows) {
  const int64_t K = a.w.K, N = a.w.N;
  if (K <= 0 || N <= 0) return DequantGemmPlan{};
  // One share where the scratch allows: on an H200, shares sized to stay in L2 were slower at
  // every M from 128 to 1024 (cuBLAS on fewer columns fills the device worse than reading its
  // operand back from HBM costs; docs/cuda.md).
  int64_t cols = N;
  if (chunk_cols > 0) {
    cols = std::clamp<int64_t>((chunk_cols + 63) / 64 * 64, 64, N);
  } else if (2 * K * N > kMostWeightBytes) {
    // As few equal shares as the widest one within the cap allows: each no wider than it, so
    // rounding a share up to whole runs cannot pass the cap (one run where K alone passes it).
    const int64_t widest = std::max<int64_t>(64, kMostWeightBytes / (2 * K) / 64 * 64);
    const int64_t shares = (N + widest - 1) / widest;
    cols = std::min<int64_t>(N, ((N + shares - 1) / shares + 63) / 64 * 64);
  }
  DequantGemmPlan p;
  p.chunk_cols = cols;
  p.weight_bytes = size_t(K) * size_t(cols) * 2;
  p.weight_bytes = (p.weight_bytes + 255) / 256 * 256;
  if (a.bias && a.M > 0) {
    p.sum_rows = sum_rows > 0 ? std::min(sum_rows, a.M)
                              : std::clamp<int64_t>(kMostSumBytes / (cols * 4), 1, a.M);
    p.sum_bytes = size_t(p.sum_rows) * size_t(cols) * 4;
  }
  return p;
}

std::string run_dequant_gemm(const GemmArgs& a, const DequantGemmPlan& plan, cublasHandle_t handle,
                             void* scratch, cudaStream_t stream, bool* out_of_memory) {
  bool ignored = false;
  bool& oom = out_of_memory ? *out_of_memory : ignored;
  oom = false;
  if (!dequant_gemm_takes(a)) return "the dequantizing GEMM does not take this call";
  if (a.M == 0 || a.w.N == 0) return "";
  if (plan.chunk_cols <= 0 || plan.chunk_cols % 64 != 0) return "a plan with no valid share";
  if (cublasStatus_t s = cublasSetStream(handle, stream); s != CUBLAS_STATUS_SUCCESS)
    return std::string("cublasSetStream: ") + cublasGetStatusString(s);
  const int64_t K = a.w.K, N = a.w.N, M = a.M;
  const size_t es = dtype_size(a.x_dtype);
  void* wd = scratch;
  float* sums = reinterpret_cast<float*>(static_cast<char*>(scratch) + plan.weight_bytes);
  const float one = 1.f, zero = 0.f;
  for (int64_t n0 = 0; n0 < N; n0 += plan.chunk_cols) {
    const int64_t n1 = std::min(N, n0 + plan.chunk_cols), cols = n1 - n0;
    if (cudaError_t e = launch_marlin_dequant(a.w, n0, n1, a.x_dtype, wd, K, stream);
        e != cudaSuccess) {
      oom = e == cudaErrorMemoryAllocation;
      return std::string("dequantizing the weight: ") + cudaGetErrorName(e);
    }
    // Column-major view: yᵀ [cols][rows] = Wd [cols][K] · xᵀ [K][rows], Wd row-major = Wdᵀ
    // column-major. Without a bias straight into y, all rows at once; with one, a block of rows
    // at a time into the fp32 sums, rounded into y with the bias added.
    const int64_t block = a.bias ? std::max<int64_t>(plan.sum_rows, 1) : M;
    for (int64_t r0 = 0; r0 < M; r0 += block) {
      const int64_t rows = std::min(block, M - r0);
      char* y = static_cast<char*>(a.y) + (size_t(r0) * size_t(a.ldy) + size_t(n0)) * es;
      const void* x = static_cast<const char*>(a.x) + size_t(r0) * size_t(a.ldx) * es;
      void* c = a.bias ? static_cast<void*>(sums) : static_cast<void*>(y);
      const int64_t ldc = a.bias ? cols : a.ldy;
      const cudaDataType_t ct = a.bias ? CUDA_R_32F : cuda_type(a.y_dtype);
      if (cublasStatus_t s =
              cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, int(cols), int(rows), int(K), &one, wd,
                           cuda_type(a.x_dtype), int(K), x, cuda_type(a.x_dtype), int(a.ldx), &zero,
                           c, ct, int(ldc), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
          s != CUBLAS_STATUS_SUCCESS) {
        oom = s == CUBLAS_STATUS_ALLOC_FAILED;
        return std::string("cublasGemmEx: ") + cublasGetStatusString(s);
      }
      if (a.bias)
        if (cudaError_t e =
                launch_finish(sums, cols, a.bias + n0, y, a.ldy, a.y_dtype, rows, cols, stream);
            e != cudaSuccess) {
          oom = e == cudaErrorMemoryAllocation;
          return std::string("adding the bias: ") + cudaGetErrorName(e);
        }
    }
  }
  return "";
}

}  // namespace nibble::cuda
