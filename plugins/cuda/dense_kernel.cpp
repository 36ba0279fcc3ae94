// The dense kernel: unquantized linear layers (routers, modules_to_not_convert) with cuBLAS
// (cublasGemmEx, fp32 accumulation). y = x · Wᵀ straight into y when x has the weight's dtype and
// there is no bias; otherwise into fp32 scratch, rounded once with the bias added. Activations of
// another dtype than the weight run against an fp32 copy of it (kept only when the layer may get
// them), so nothing is rounded on the way in.
#include <nibble/sdk/numeric.hpp>
#include <nibble/sdk/portable_kernels.hpp>

#include <cublas_v2.h>

#include "cuda_error.hpp"
#include "device_buffer.hpp"
#include "kernels.hpp"
#include "launch.hpp"
#include "stream_scratch.hpp"

namespace nibble::cuda {

namespace {

DType dtype_from(DLDataType t) {
  if (sdk::same_dtype(t, sdk::dtype_f16())) return DType::f16;
  if (sdk::same_dtype(t, sdk::dtype_bf16())) return DType::bf16;
  return DType::f32;
}

uint32_t flag_of(DType t) {
  return t == DType::f32   ? NIBBLE_DTYPE_F32
         : t == DType::f16 ? NIBBLE_DTYPE_F16
                           : NIBBLE_DTYPE_BF16;
}

cudaDataType_t cuda_type(DType t) {
  return t == DType::f32 ? CUDA_R_32F : t == DType::f16 ? CUDA_R_16F : CUDA_R_16BF;
}

void check_cublas(cublasStatus_t s, const std::string& what) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  throw sdk::PluginError(s == CUBLAS_STATUS_ALLOC_FAILED ? NIBBLE_OUT_OF_MEMORY : NIBBLE_INTERNAL,
                         what + ": " + cublasGetStatusString(s));
}

class DensePrepared : public sdk::Prepared {
 public:
  DensePrepared(int device, const nibble_dense_weight& w, uint32_t act_dtypes,
                std::shared_ptr<CublasPool> pool)
      : device_(device), dtype_(dtype_from(w.dtype)), K_(w.K), N_(w.N), pool_(std::move(pool)) {
    const size_t count = size_t(w.K) * size_t(w.N);
    weight_ = DeviceBuffer::upload(device, w.data, count * dtype_size(dtype_));
    if ((act_dtypes & ~flag_of(dtype_)) != 0 && dtype_ != DType::f32) {
      std::vector<float> wide(count);
      for (size_t i = 0; i < count; ++i) wide[i] = sdk::load_float(w.data, w.dtype, i);
      weight_f32_ = DeviceBuffer::upload(device, wide);
    }
    if (w.bias) {
      std::vector<float> b(static_cast<size_t>(w.N));
      for (int64_t n = 0; n < w.N; ++n)
        b[size_t(n)] = sdk::load_float(w.bias, w.bias_dtype, size_t(n));
      bias_ = DeviceBuffer::upload(device, b);
    }
  }
  size_t bytes() const override { return weight_.bytes() + weight_f32_.bytes() + bias_.bytes(); }
  void forward(const sdk::ForwardArgs& f, const sdk::Exec& e) const override {
    const std::string what = std::string(desc().name) + ": dense";
    DeviceGuard guard(device_);
    const cudaStream_t stream = static_cast<cudaStream_t>(e.stream);
    const DType xt = dtype_from(f.x.dtype);
    const bool same = xt == dtype_;
    if (!same && dtype_ != DType::f32 && !weight_f32_.get())
      throw sdk::PluginError(NIBBLE_INVALID_ARGUMENT,
                             what + ": x of dtype " + sdk::dtype_name(f.x.dtype) +
                                 " was not among the layer's activation dtypes at prepare");
    const bool direct = same && !bias_.get();
    const int64_t M = f.M;
    // Scratch: x widened to fp32 when the weight is used as fp32, and the fp32 result.
    const size_t x_bytes = same ? 0 : size_t(M * K_) * 4, y_bytes = direct ? 0 : size_t(M * N_) * 4;
    StreamScratch scratch(x_bytes + y_bytes, stream, what);
    const void* A = same || dtype_ == DType::f32 ? weight_.get() : weight_f32_.get();
    const DType at = same ? dtype_ : DType::f32;
    const void* B = f.x.data;
    int64_t ldb = f.x.stride;
    if (!same) {
      check(launch_to_f32(f.x.data, f.x.stride, xt, scratch.at<float>(), K_, M, K_, stream),
            what + ": widening x");
      B = scratch.at<float>();
      ldb = K_;
    }
    void* C = direct ? static_cast<void*>(f.y.data) : scratch.at<float>(x_bytes);
    const int64_t ldc = direct ? f.y.stride : N_;
    const DType ct = direct ? xt : DType::f32;
    PooledHandle handle(*pool_, device_);
    check_cublas(cublasSetStream(handle.get(), stream), what + ": cublasSetStream");
    const float alpha = 1.f, beta = 0.f;
    // Column-major view: yᵀ [N][M] = W [N][K] · xᵀ [K][M], W stored row-major = Wᵀ column-major.
    check_cublas(cublasGemmEx(handle.get(), CUBLAS_OP_T, CUBLAS_OP_N, int(N_), int(M), int(K_),
                              &alpha, A, cuda_type(at), int(K_), B, cuda_type(at), int(ldb), &beta,
                              C, cuda_type(ct), int(ldc), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 what + ": cublasGemmEx");
    if (!direct)
      check(launch_finish(scratch.at<float>(x_bytes), N_, bias_.as<const float>(), f.y.data,
                          f.y.stride, xt, M, N_, stream),
            what + ": adding the bias");
  }

 private:
  int device_;
  DType dtype_;
  int64_t K_, N_;
  std::shared_ptr<CublasPool> pool_;
  DeviceBuffer weight_, weight_f32_, bias_;
};

class DenseKernel : public sdk::Kernel {
 public:
  explicit DenseKernel(std::shared_ptr<CublasPool> pool) : pool_(std::move(pool)) {}
  sdk::KernelInfo info() const override {
    return kernel_info("dense_cublas", NIBBLE_OP_DENSE, kDensePriority, NIBBLE_MODE_FLOAT);
  }
  std::string why_not(const nibble_layer_desc& d) const override {
    if (d.op != NIBBLE_OP_DENSE) return "dense_cublas computes unquantized linear layers only";
    if (d.numeric_mode == NIBBLE_MODE_W4A8)
      return "dense_cublas keeps activations in floating point; w4a8 is not implemented";
    if (d.K <= 0 || d.N <= 0) return "empty layer";
    if (d.K > INT32_MAX || d.N > INT32_MAX) return "K or N beyond cuBLAS's 32-bit sizes";
    if (!sdk::is_float_dtype(d.weight_dtype))
      return "weight dtype " + sdk::dtype_name(d.weight_dtype) + " (expected f32, f16 or bf16)";
    if (d.act_dtypes & ~sdk::portable::kFloatActDtypes)
      return "activation dtypes other than f32, f16 and bf16 were requested";
    return why_not_device(d);
  }
  std::unique_ptr<sdk::Prepared> prepare(const nibble_layer_desc& d,
                                         const nibble_weight_input& in) const override {
    const nibble_dense_weight& w = *in.dense;
    sdk::portable::require_shape(d, w.N, w.K);
    sdk::require(w.data != nullptr && sdk::is_float_dtype(w.dtype),
                 sdk::portable::layer_name(d) + ": dense weight missing or not f32/f16/bf16");
    return std::make_unique<DensePrepared>(sdk::layer_device(d).device_id, w, d.act_dtypes, pool_);
  }

 private:
  std::shared_ptr<CublasPool> pool_;
};

}  // namespace

std::unique_ptr<sdk::Kernel> make_dense(std::shared_ptr<CublasPool> cublas) {
  return std::make_unique<DenseKernel>(std::move(cublas));
}

}  // namespace nibble::cuda
