// The conformance kit's test material, public so the tests hold plugins to the same reference:
// random canonical weights, dense weights and activations, float64 reference results for linear,
// dense and MoE layers, and owning 2-D tensors. Deterministic for a given seed. Header-only; needs
// only the SDK.
#pragma once

#include <nibble/sdk/plugin.h>
#include <nibble/sdk/host/canonical_weight.hpp>
#include <nibble/sdk/host/expert_source.hpp>
#include <nibble/sdk/host/layer_desc.hpp>
#include <nibble/sdk/numeric.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace nibble::conformance {

/// How to draw a random quantized weight.
struct QuantSpec {
  int64_t K = 256;
  int64_t N = 64;
  int bits = 4;
  int group_size = 128;    ///< -1: per channel
  bool symmetric = false;  ///< zeros all 2^(bits-1)
  bool act_order = false;  ///< random g_idx (groups formed in a random channel order)
  bool bias = false;
  bool v1_zero16 = false;  ///< 4-bit asym: zeros 1 .. 16 as GPTQ v1 decodes them (16 = stored 0xF)
  DLDataType scales_dtype = sdk::dtype_f16();
  uint32_t seed = 1;
};

/// The test weights are the SDK's owned canonical weight.
using sdk::host::CanonicalWeight;

/// The descriptor of `w` as a w4a16 linear layer taking every activation dtype.
inline nibble_layer_desc linear_desc(const CanonicalWeight& w, const char* name = "test.linear") {
  return sdk::host::linear_desc(w.view(), name);
}

/// Draw a random quantized weight following `s`. Values cover the whole code range; scales are
/// non-zero and vary per (group, channel).
inline CanonicalWeight random_weight(const QuantSpec& s) {
  std::mt19937 rng(s.seed);
  CanonicalWeight w;
  w.bits = s.bits;
  w.group_size = s.group_size;
  w.K = s.K;
  w.N = s.N;
  const int64_t gs = s.group_size == -1 ? s.K : s.group_size;
  w.num_groups = (s.K + gs - 1) / gs;
  const int maxq = (1 << s.bits) - 1;
  std::uniform_int_distribution<int> code(0, maxq);
  w.q.resize(size_t(s.K * s.N));
  for (auto& v : w.q) v = uint8_t(code(rng));
  w.zeros.resize(size_t(w.num_groups * s.N));
  for (auto& z : w.zeros) {
    if (s.symmetric) {
      z = uint8_t(1 << (s.bits - 1));
    } else {
      z = uint8_t(code(rng));
      // GPTQ v1 stores zero - 1 in 4 bits, so its effective zero points are 1 .. 16.
      if (s.v1_zero16 && s.bits == 4) z = uint8_t(1 + code(rng));
    }
  }
  std::uniform_real_distribution<float> mag(0.5f, 1.5f);
  const float base = 1.0f / (float(maxq) * std::sqrt(float(s.K)));
  w.scales_dtype = s.scales_dtype;
  const size_t ns = size_t(w.num_groups * s.N);
  w.scales.resize(ns * sdk::dtype_bytes(s.scales_dtype));
  for (size_t i = 0; i < ns; ++i)
    sdk::store_float(w.scales.data(), s.scales_dtype, i,
                     base * mag(rng) * (rng() % 5 == 0 ? -1.f : 1.f));
  if (s.act_order && s.group_size != -1) {
    std::vector<int32_t> perm(size_t(s.K));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    w.g_idx.resize(size_t(s.K));
    for (int64_t i = 0; i < s.K; ++i) w.g_idx[size_t(perm[size_t(i)])] = int32_t(i / gs);
  }
  if (s.bias) {
    std::normal_distribution<float> nd(0.f, 0.1f);
    w.bias_dtype = sdk::dtype_f16();
    w.bias.resize(size_t(s.N) * 2);
    for (int64_t n = 0; n < s.N; ++n)
      sdk::store_float(w.bias.data(), w.bias_dtype, size_t(n), nd(rng));
  }
  return w;
}

/// A row-major activation matrix in a float dtype, with its exact values in double.
struct Activations {
  int64_t M = 0, K = 0;
  DLDataType dtype = sdk::dtype_f32();
  std::vector<uint8_t> bytes;  ///< M*K elements of dtype
  std::vector<double> values;  ///< the same values, exactly, as double
  void* data() { return bytes.data(); }
};

/// Random activations N(0,1) rounded to `dtype`.
inline Activations random_activations(int64_t M, int64_t K, DLDataType dtype, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  Activations a;
  a.M = M;
  a.K = K;
  a.dtype = dtype;
  a.bytes.resize(size_t(M * K) * sdk::dtype_bytes(dtype));
  a.values.resize(size_t(M * K));
  for (size_t i = 0; i < a.values.size(); ++i) {
    sdk::store_float(a.bytes.data(), dtype, i, nd(rng));
    a.values[i] = sdk::load_float(a.bytes.data(), dtype, i);
  }
  return a;
}

/// float64 reference of a quantized linear layer: y[M][N] = x · W^T + b.
inline std::vector<double> reference_linear(const CanonicalWeight& w, const std::vector<double>& x,
                                            int64_t M) {
  std::vector<double> wd(size_t(w.N * w.K));
  for (int64_t n = 0; n < w.N; ++n)
    for (int64_t k = 0; k < w.K; ++k) wd[size_t(n * w.K + k)] = w.dequant(n, k);
  std::vector<double> y(size_t(M * w.N));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < w.N; ++n) {
      double acc = w.bias_at(n);
      const double* xr = &x[size_t(m * w.K)];
      const double* wr = &wd[size_t(n * w.K)];
      for (int64_t k = 0; k < w.K; ++k) acc += xr[k] * wr[k];
      y[size_t(m * w.N + n)] = acc;
    }
  return y;
}

/// ‖y − ref‖₂ / ‖ref‖₂.
inline double relative_error(const std::vector<double>& y, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    double d = y[i] - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

/// A NaN bit pattern for poisoning output buffers of any float dtype.
inline void poison(std::vector<uint8_t>& bytes, DLDataType dtype) {
  if (dtype.bits == 32) {
    float nan = std::nanf("");
    for (size_t i = 0; i + 4 <= bytes.size(); i += 4) std::memcpy(&bytes[i], &nan, 4);
  } else {
    uint16_t nan = dtype.code == kDLBfloat ? 0x7fc1 : 0x7e01;
    for (size_t i = 0; i + 2 <= bytes.size(); i += 2) std::memcpy(&bytes[i], &nan, 2);
  }
}

/// Read an output buffer back as doubles; counts elements that are not finite in *non_finite.
inline std::vector<double> read_output(const std::vector<uint8_t>& bytes, DLDataType dtype,
                                       size_t count, size_t* non_finite) {
  std::vector<double> out(count);
  size_t bad = 0;
  for (size_t i = 0; i < count; ++i) {
    out[i] = sdk::load_float(bytes.data(), dtype, i);
    if (!std::isfinite(out[i])) ++bad;
  }
  if (non_finite) *non_finite = bad;
  return out;
}

/// MoE experts for tests: w13 [2I][K] (gate rows then up rows) and w2 [K][I] per expert.
struct TestExperts {
  int64_t K = 0, I = 0;
  std::vector<CanonicalWeight> w13, w2;
};

/// Random experts; w13 and w2 may use different group sizes.
inline TestExperts random_experts(int E, int64_t K, int64_t I, int bits, int gs13, int gs2,
                                  bool symmetric, bool act_order, uint32_t seed,
                                  bool v1_zero16 = false) {
  TestExperts ex;
  ex.K = K;
  ex.I = I;
  for (int e = 0; e < E; ++e) {
    QuantSpec a{K,
                2 * I,
                bits,
                gs13,
                symmetric,
                act_order,
                false,
                v1_zero16,
                sdk::dtype_f16(),
                seed * 1000u + uint32_t(2 * e)};
    QuantSpec b{I,
                K,
                bits,
                gs2,
                symmetric,
                act_order,
                false,
                v1_zero16,
                sdk::dtype_f16(),
                seed * 1000u + uint32_t(2 * e + 1)};
    ex.w13.push_back(random_weight(a));
    ex.w2.push_back(random_weight(b));
  }
  return ex;
}

/// Views of every expert's w13 and w2, lent through a nibble_moe_source.
inline sdk::host::ExpertViews expert_views(const TestExperts& ex) {
  std::vector<nibble_canonical_weight> w13, w2;
  for (size_t e = 0; e < ex.w13.size(); ++e) {
    w13.push_back(ex.w13[e].view());
    w2.push_back(ex.w2[e].view());
  }
  return sdk::host::ExpertViews(std::move(w13), std::move(w2));
}

/// The MoE descriptor of test experts, every expert seen.
inline nibble_layer_desc moe_desc(const TestExperts& ex, int top_k, const char* name = "test.moe") {
  const sdk::host::ExpertViews views = expert_views(ex);
  const sdk::host::MoeShape shape{ex.K, ex.I, int32_t(ex.w13.size()), top_k};
  return sdk::host::moe_desc(shape, views.w13(), views.w2(), name);
}

/// A quantized weight dequantized once, [N][K] in double (references reuse it across rows).
inline std::vector<double> dequantized(const CanonicalWeight& w) {
  std::vector<double> d(size_t(w.N * w.K));
  for (int64_t n = 0; n < w.N; ++n)
    for (int64_t k = 0; k < w.K; ++k) d[size_t(n * w.K + k)] = w.dequant(n, k);
  return d;
}

/// float64 reference of an MoE block with given routing: y[m] = Σ_j wt[m,j] · down(silu(g)·u);
/// an id of -1 contributes nothing.
inline std::vector<double> reference_moe(const TestExperts& ex, const std::vector<double>& x,
                                         int64_t M, int top_k, const std::vector<int32_t>& ids,
                                         const std::vector<double>& weights) {
  const int64_t K = ex.K, I = ex.I;
  std::vector<double> y(size_t(M * K), 0.0);
  std::vector<double> h(static_cast<size_t>(I));
  std::vector<std::vector<double>> w13(ex.w13.size()), w2(ex.w2.size());
  for (int64_t m = 0; m < M; ++m)
    for (int j = 0; j < top_k; ++j) {
      int e = ids[size_t(m * top_k + j)];
      if (e < 0) continue;
      if (w13[size_t(e)].empty()) {
        w13[size_t(e)] = dequantized(ex.w13[size_t(e)]);
        w2[size_t(e)] = dequantized(ex.w2[size_t(e)]);
      }
      const std::vector<double>& a = w13[size_t(e)];
      const std::vector<double>& b = w2[size_t(e)];
      const double* xr = &x[size_t(m * K)];
      for (int64_t i = 0; i < I; ++i) {
        double g = 0, u = 0;
        for (int64_t k = 0; k < K; ++k) {
          g += xr[k] * a[size_t(i * K + k)];
          u += xr[k] * a[size_t((I + i) * K + k)];
        }
        h[size_t(i)] = g / (1.0 + std::exp(-g)) * u;
      }
      double wt = weights[size_t(m * top_k + j)];
      for (int64_t k = 0; k < K; ++k) {
        double acc = 0;
        for (int64_t i = 0; i < I; ++i) acc += h[size_t(i)] * b[size_t(k * I + i)];
        y[size_t(m * K + k)] += wt * acc;
      }
    }
  return y;
}

/// A plain (unquantized) weight [N][K] of an f32/f16/bf16 dtype with optional f16 bias.
struct TestDense {
  int64_t K = 0, N = 0;
  DLDataType dtype = sdk::dtype_f32();
  std::vector<uint8_t> data;   ///< N*K elements of dtype
  std::vector<double> values;  ///< the same, exactly, as double
  std::vector<uint16_t> bias;  ///< f16 bias when present
  /// The C view (valid while *this lives).
  nibble_dense_weight view() const {
    nibble_dense_weight w{};
    w.struct_size = sizeof w;
    w.K = K;
    w.N = N;
    w.data = data.data();
    w.dtype = dtype;
    w.bias = bias.empty() ? nullptr : bias.data();
    w.bias_dtype = sdk::dtype_f16();
    return w;
  }
  /// The layer descriptor of this weight as a dense layer.
  nibble_layer_desc desc(const char* name = "conformance.dense") const {
    return sdk::host::dense_desc(view(), name);
  }
};

/// A random dense weight, entries N(0, 1/K) rounded to `dtype`.
inline TestDense random_dense(int64_t K, int64_t N, DLDataType dtype, bool with_bias,
                              uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f / std::sqrt(float(K)));
  TestDense w;
  w.K = K;
  w.N = N;
  w.dtype = dtype;
  w.data.resize(size_t(K * N) * sdk::dtype_bytes(dtype));
  w.values.resize(size_t(K * N));
  for (size_t i = 0; i < w.values.size(); ++i) {
    sdk::store_float(w.data.data(), dtype, i, nd(rng));
    w.values[i] = sdk::load_float(w.data.data(), dtype, i);
  }
  if (with_bias) {
    std::normal_distribution<float> bd(0.f, 0.1f);
    w.bias.resize(size_t(N));
    for (auto& b : w.bias) b = sdk::f32_to_f16(bd(rng));
  }
  return w;
}

/// float64 reference of a dense layer: y[M][N] = x · W^T + b.
inline std::vector<double> reference_dense(const TestDense& w, const std::vector<double>& x,
                                           int64_t M) {
  std::vector<double> y(size_t(M * w.N));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < w.N; ++n) {
      double acc = w.bias.empty() ? 0.0 : double(sdk::f16_to_f32(w.bias[size_t(n)]));
      for (int64_t k = 0; k < w.K; ++k)
        acc += x[size_t(m * w.K + k)] * w.values[size_t(n * w.K + k)];
      y[size_t(m * w.N + n)] = acc;
    }
  return y;
}

/// A 2-D DLTensor over a byte buffer it owns, optionally with a row stride larger than cols.
struct Tensor2D {
  std::vector<uint8_t> bytes;
  int64_t shape[2] = {0, 0};
  int64_t strides[2] = {0, 1};
  DLTensor t{};
  /// rows × cols of `dtype`, zero-filled; row_stride 0 means packed (strides == NULL).
  Tensor2D(int64_t rows, int64_t cols, DLDataType dtype, int64_t row_stride = 0) {
    const int64_t stride = row_stride > 0 ? row_stride : cols;
    // One spare element so a zero-size tensor still has a non-null data pointer.
    bytes.resize(size_t(rows * stride + 1) * sdk::dtype_bytes(dtype));
    shape[0] = rows;
    shape[1] = cols;
    strides[0] = stride;
    strides[1] = 1;
    t.data = bytes.data();
    t.device = DLDevice{kDLCPU, 0};
    t.ndim = 2;
    t.dtype = dtype;
    t.shape = shape;
    t.strides = row_stride > 0 ? strides : nullptr;
    t.byte_offset = 0;
  }
  Tensor2D(const Tensor2D&) = delete;
  Tensor2D& operator=(const Tensor2D&) = delete;
  /// Element (r, c) as double.
  double get(int64_t r, int64_t c) const {
    return sdk::load_float(bytes.data(), t.dtype, size_t(r * strides[0] + c));
  }
};

/// A fresh tensor holding the activations `a`.
inline std::unique_ptr<Tensor2D> tensor_of(const Activations& a) {
  auto t = std::make_unique<Tensor2D>(a.M, a.K, a.dtype);
  std::memcpy(t->bytes.data(), a.bytes.data(), a.bytes.size());
  return t;
}

}  // namespace nibble::conformance
