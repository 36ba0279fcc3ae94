// The quantized linear kernels: linear_marlin (the Marlin layout; the small-M streaming kernel)
// wherever Marlin's rules hold, and linear_general (the general layout) for every other valid
// weight. Both upload at prepare and queue their forward on the call's stream; linear_marlin sends
// large M with f16/bf16 activations to the warpgroup-MMA kernel (sm_90a, up to 512 rows) or the
// dequantizing cuBLAS GEMM (dequant_gemm.hpp).
#include <nibble/sdk/portable_kernels.hpp>

#include <algorithm>
#include <cmath>

#include "cuda_error.hpp"
#include "dequant_gemm.hpp"
#include "general_weight.hpp"
#include "kernels.hpp"
#include "marlin_weight.hpp"
#include "stream_scratch.hpp"

namespace nibble::cuda {

namespace {

DType act_dtype(DLDataType t) {
  if (sdk::same_dtype(t, sdk::dtype_f16())) return DType::f16;
  if (sdk::same_dtype(t, sdk::dtype_bf16())) return DType::bf16;
  return DType::f32;
}

int device_attribute(int device, cudaDeviceAttr what, const char* name) {
  int v = 0;
  check(cudaDeviceGetAttribute(&v, what, device),
        std::string("cudaDeviceGetAttribute(") + name + ")");
  return v;
}

// Whether every weight dequantized as (q − z)·s is finite in f16: |q − z| ≤ max(z, 2^bits − 1 − z).
bool dequantized_fits_f16(const sdk::QuantWeight& w) {
  const int top = (1 << w.bits()) - 1;
  for (int64_t g = 0; g < w.num_groups(); ++g)
    for (int64_t n = 0; n < w.N(); ++n) {
      const int z = w.zero(g, n);
      const double most = std::fabs(double(w.scale(g, n))) * double(std::max(z, top - z));
      if (!(most <= 65504.0)) return false;  // NaN scales fail too
    }
  return true;
}

// Bias as fp32 on the device (empty without bias).
DeviceBuffer bias_on_device(int device, const sdk::QuantWeight& w) {
  if (!w.has_bias()) return DeviceBuffer();
  std::vector<float> b(static_cast<size_t>(w.N()));
  for (int64_t n = 0; n < w.N(); ++n) b[size_t(n)] = w.bias(n);
  return DeviceBuffer::upload(device, b);
}

class MarlinLinearPrepared : public sdk::Prepared {
 public:
  MarlinLinearPrepared(int device, const sdk::QuantWeight& w, const std::string& what,
                       std::shared_ptr<CublasPool> cublas)
      : device_(device),
        stack_(device, 1, pack_marlin(w, false, what)),
        bias_(bias_on_device(device, w)),
        sms_(device_attribute(device, cudaDevAttrMultiProcessorCount, "multiprocessor count")),
        fits_f16_(dequantized_fits_f16(w)),
        cublas_(std::move(cublas)) {
    DeviceGuard guard(device_);
    wgmma_ = wgmma_available();
    if (wgmma_) wgmma_fit_ = wgmma_fit();
  }
  size_t bytes() const override { return stack_.bytes() + bias_.bytes(); }
  void forward(const sdk::ForwardArgs& f, const sdk::Exec& e) const override {
    DeviceGuard guard(device_);
    GemmArgs a;
    a.w = stack_.view();
    a.x = f.x.data;
    a.ldx = f.x.stride;
    a.x_dtype = act_dtype(f.x.dtype);
    a.y = f.y.data;
    a.ldy = f.y.stride;
    a.y_dtype = a.x_dtype;
    a.bias = bias_.as<const float>();
    a.M = f.M;
    const cudaStream_t stream = static_cast<cudaStream_t>(e.stream);
    const LargeM large = choose_large_m(a, wgmma_ ? &wgmma_fit_ : nullptr, fits_f16_);
    if (large == LargeM::wgmma) {
      check(launch_marlin_wgmma(a, choose_wgmma_config(a, wgmma_fit_), stream),
            std::string(desc().name) + ": linear_marlin warpgroup-MMA launch");
      return;
    }
    if (large == LargeM::dequant_gemm) {
      const std::string what = std::string(desc().name) + ": linear_marlin large-M GEMM";
      const DequantGemmPlan plan = plan_dequant_gemm(a);
      StreamScratch scratch(plan.scratch_bytes(), stream, what);
      PooledHandle handle(*cublas_, device_);
      bool out_of_memory = false;
      const std::string failed =
          run_dequant_gemm(a, plan, handle.get(), scratch.at<void>(), stream, &out_of_memory);
      if (!failed.empty())
        throw sdk::PluginError(out_of_memory ? NIBBLE_OUT_OF_MEMORY : NIBBLE_INTERNAL,
                               what + ": " + failed);
      return;
    }
    check(launch_marlin(a, sms_, stream), std::string(desc().name) + ": linear_marlin launch");
  }

 private:
  int device_;
  MarlinStack stack_;
  DeviceBuffer bias_;
  int sms_;
  bool fits_f16_;  // f16 activations may take the dequantizing GEMM and the warpgroup MMA
  std::shared_ptr<CublasPool> cublas_;
  bool wgmma_ = false;  // the device runs the warpgroup-MMA kernel (compute capability 9.0)
  WgmmaFit wgmma_fit_;
};

class GeneralLinearPrepared : public sdk::Prepared {
 public:
  GeneralLinearPrepared(int device, const sdk::QuantWeight& w)
      : device_(device), weight_(device, w), bias_(bias_on_device(device, w)) {}
  size_t bytes() const override { return weight_.bytes() + bias_.bytes(); }
  void forward(const sdk::ForwardArgs& f, const sdk::Exec& e) const override {
    DeviceGuard guard(device_);
    GeneralArgs a;
    a.w = weight_.view();
    a.x = f.x.data;
    a.ldx = f.x.stride;
    a.x_dtype = act_dtype(f.x.dtype);
    a.y = f.y.data;
    a.ldy = f.y.stride;
    a.bias = bias_.as<const float>();
    a.M = f.M;
    check(launch_general(a, static_cast<cudaStream_t>(e.stream)),
          std::string(desc().name) + ": linear_general launch");
  }

 private:
  int device_;
  GeneralWeight weight_;
  DeviceBuffer bias_;
};

class MarlinLinear : public sdk::Kernel {
 public:
  explicit MarlinLinear(std::shared_ptr<CublasPool> cublas) : cublas_(std::move(cublas)) {}
  sdk::KernelInfo info() const override {
    return kernel_info("linear_marlin", NIBBLE_OP_LINEAR, kMarlinPriority, NIBBLE_MODE_W4A16);
  }
  std::string why_not(const nibble_layer_desc& d) const override {
    if (d.op != NIBBLE_OP_LINEAR) return "linear_marlin computes quantized linear layers only";
    std::string why = why_not_quantized(d);
    if (!why.empty()) return why;
    return sdk::marlin::why_not(d.K, d.N, d.group_size, d.has_g_idx != 0, d.symmetric != 0, d.bits,
                                sdk::max_zero(d), sdk::portable::layer_name(d));
  }
  std::unique_ptr<sdk::Prepared> prepare(const nibble_layer_desc& d,
                                         const nibble_weight_input& in) const override {
    const std::string what = sdk::portable::layer_name(d);
    sdk::QuantWeight w(*in.quantized, what);
    sdk::portable::require_shape(d, w.N(), w.K());
    return std::make_unique<MarlinLinearPrepared>(sdk::layer_device(d).device_id, w, what, cublas_);
  }

 private:
  std::shared_ptr<CublasPool> cublas_;
};

class GeneralLinear : public sdk::Kernel {
 public:
  sdk::KernelInfo info() const override {
    return kernel_info("linear_general", NIBBLE_OP_LINEAR, kGeneralPriority, NIBBLE_MODE_W4A16);
  }
  std::string why_not(const nibble_layer_desc& d) const override {
    if (d.op != NIBBLE_OP_LINEAR) return "linear_general computes quantized linear layers only";
    return why_not_quantized(d);
  }
  std::unique_ptr<sdk::Prepared> prepare(const nibble_layer_desc& d,
                                         const nibble_weight_input& in) const override {
    sdk::QuantWeight w(*in.quantized, sdk::portable::layer_name(d));
    sdk::portable::require_shape(d, w.N(), w.K());
    return std::make_unique<GeneralLinearPrepared>(sdk::layer_device(d).device_id, w);
  }
};

}  // namespace

std::unique_ptr<sdk::Kernel> make_marlin_linear(std::shared_ptr<CublasPool> cublas) {
  return std::make_unique<MarlinLinear>(std::move(cublas));
}
std::unique_ptr<sdk::Kernel> make_general_linear() { return std::make_unique<GeneralLinear>(); }

}  // namespace nibble::cuda
