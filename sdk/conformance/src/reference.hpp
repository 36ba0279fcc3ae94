// The kit's own test material: random canonical weights, dense weights and activations, and
// float64 reference results for linear, dense and MoE layers. Deterministic for a given seed.
// The tests use this file too (tests/support/reference.hpp includes it); the kit must not
// depend on tests/.
#pragma once

#include <nibble/sdk/plugin.h>
#include <nibble/sdk/numeric.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
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

/// An owning canonical weight; `view()` borrows it as the C struct.
struct TestWeight {
  int bits = 4;
  int group_size = 128;
  int64_t K = 0, N = 0, num_groups = 0;
  std::vector<uint8_t> q, zeros;
  std::vector<uint16_t> scales16;  ///< f16/bf16 scales
  std::vector<float> scales32;     ///< f32 scales
  DLDataType scales_dtype = sdk::dtype_f16();
  std::vector<int32_t> g_idx;
  std::vector<uint16_t> bias;  ///< f16 bias when present
  /// The C view (valid while *this lives).
  nibble_canonical_weight view() const {
    nibble_canonical_weight w{};
    w.struct_size = sizeof w;
    w.bits = bits;
    w.group_size = group_size;
    w.K = K;
    w.N = N;
    w.num_groups = num_groups;
    w.q = q.data();
    w.scales = scales_dtype.bits == 32 ? static_cast<const void*>(scales32.data())
                                       : static_cast<const void*>(scales16.data());
    w.scales_dtype = scales_dtype;
    w.zeros = zeros.data();
    w.g_idx = g_idx.empty() ? nullptr : g_idx.data();
    w.bias = bias.empty() ? nullptr : bias.data();
    w.bias_dtype = sdk::dtype_f16();
    return w;
  }
  /// Group of channel k.
  int64_t group(int64_t k) const {
    if (!g_idx.empty()) return g_idx[size_t(k)];
    return group_size == -1 ? 0 : k / group_size;
  }
  /// Scale (g, n) as double.
  double scale(int64_t g, int64_t n) const {
    size_t i = size_t(g) * size_t(N) + size_t(n);
    return scales_dtype.bits == 32 ? double(scales32[i])
                                   : double(sdk::load_float(scales16.data(), scales_dtype, i));
  }
  /// Dequantized W[n][k] in double.
  double dequant(int64_t n, int64_t k) const {
    int64_t g = group(k);
    return (double(q[size_t(n) * size_t(K) + size_t(k)]) -
            double(zeros[size_t(g) * size_t(N) + size_t(n)])) *
           scale(g, n);
  }
  /// Bias n in double (0 without).
  double bias_at(int64_t n) const {
    return bias.empty() ? 0.0 : double(sdk::f16_to_f32(bias[size_t(n)]));
  }
  /// The layer descriptor of this weight as a linear layer.
  nibble_layer_desc linear_desc(const char* name = "test.linear") const {
    nibble_layer_desc d{};
    d.struct_size = sizeof d;
    d.op = NIBBLE_OP_LINEAR;
    d.name = name;
    d.K = K;
    d.N = N;
    d.bits = bits;
    d.group_size = group_size;
    d.has_g_idx = g_idx.empty() ? 0 : 1;
    d.symmetric = is_symmetric() ? 1 : 0;
    d.has_bias = bias.empty() ? 0 : 1;
    d.weight_dtype = scales_dtype;
    d.numeric_mode = NIBBLE_MODE_WEIGHT_ONLY;
    d.act_dtypes = NIBBLE_DTYPE_F32 | NIBBLE_DTYPE_F16 | NIBBLE_DTYPE_BF16;
#if NIBBLE_ABI_MINOR >= 1
    d.max_zero = zeros.empty() ? 0 : *std::max_element(zeros.begin(), zeros.end());
#endif
    return d;
  }
  /// Whether every zero is 2^(bits-1).
  bool is_symmetric() const {
    uint8_t mid = uint8_t(1u << (bits - 1));
    return std::all_of(zeros.begin(), zeros.end(), [&](uint8_t z) { return z == mid; });
  }
};

/// Draw a random quantized weight following `s`. Values cover the whole code range; scales are
/// non-zero and vary per (group, channel).
inline TestWeight random_weight(const QuantSpec& s) {
  std::mt19937 rng(s.seed);
  TestWeight w;
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
  size_t ns = size_t(w.num_groups * s.N);
  if (s.scales_dtype.bits == 32) {
    w.scales32.resize(ns);
    for (auto& v : w.scales32) v = base * mag(rng) * (rng() % 5 == 0 ? -1.f : 1.f);
  } else {
    w.scales16.resize(ns);
    for (auto& v : w.scales16) {
      float f = base * mag(rng) * (rng() % 5 == 0 ? -1.f : 1.f);
      v = s.scales_dtype.code == kDLBfloat ? sdk::f32_to_bf16(f) : sdk::f32_to_f16(f);
    }
  }
  if (s.act_order && s.group_size != -1) {
    std::vector<int32_t> perm(size_t(s.K));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    w.g_idx.resize(size_t(s.K));
    for (int64_t i = 0; i < s.K; ++i) w.g_idx[size_t(perm[size_t(i)])] = int32_t(i / gs);
  }
  if (s.bias) {
    std::normal_distribution<float> nd(0.f, 0.1f);
    w.bias.resize(size_t(s.N));
    for (auto& b : w.bias) b = sdk::f32_to_f16(nd(rng));
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
inline std::vector<double> reference_linear(const TestWeight& w, const std::vector<double>& x,
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
  std::vector<TestWeight> w13, w2;
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

/// A quantized weight dequantized once, [N][K] in double (references reuse it across rows).
inline std::vector<double> dequantized(const TestWeight& w) {
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
    nibble_layer_desc d{};
    d.struct_size = sizeof d;
    d.op = NIBBLE_OP_DENSE;
    d.name = name;
    d.K = K;
    d.N = N;
    d.group_size = -1;
    d.has_bias = bias.empty() ? 0 : 1;
    d.weight_dtype = dtype;
    d.numeric_mode = NIBBLE_MODE_FLOAT;
    d.act_dtypes = NIBBLE_DTYPE_F32 | NIBBLE_DTYPE_F16 | NIBBLE_DTYPE_BF16;
    return d;
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

}  // namespace nibble::conformance
