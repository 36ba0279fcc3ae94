// Helpers for layer tests: synthetic checkpoints written once per process, tensors, references.
#pragma once

#include <nibble/checkpoint.hpp>
#include <nibble/quantize.hpp>
#include <nibble/runtime.hpp>
#include <nibble/sdk/numeric.hpp>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

namespace nibble::test {

/// Options that load exactly the in-tree plugins of the build tree.
inline RuntimeOptions in_tree(const std::string& backend, NumericMode mode = NumericMode::W4A16) {
  RuntimeOptions o;
  o.use_default_plugin_dir = false;
  o.plugin_dirs = {NIBBLE_PLUGIN_BUILD_DIR};
  o.backend = backend;
  o.mode = mode;
  o.threads = 2;
  return o;
}

/// A per-process scratch directory.
inline std::filesystem::path scratch(const std::string& name) {
  auto p =
      std::filesystem::temp_directory_path() / ("nibble_test_" + std::to_string(getpid())) / name;
  std::filesystem::create_directories(p);
  return p;
}

/// An owned 2-D activation buffer with a DLTensor over it.
struct Mat {
  std::vector<uint64_t> words;
  int64_t shape[2] = {0, 0};
  DLTensor t{};
  Mat(int64_t rows, int64_t cols, DLDataType dtype) {
    words.assign((size_t(rows * cols) * sdk::dtype_bytes(dtype) + 7) / 8 + 1, 0);
    shape[0] = rows;
    shape[1] = cols;
    t = DLTensor{words.data(), {kDLCPU, 0}, 2, dtype, shape, nullptr, 0};
  }
  size_t size() const { return size_t(shape[0] * shape[1]); }
  double get(size_t i) const { return sdk::load_float(words.data(), t.dtype, i); }
  void set(size_t i, float v) { sdk::store_float(words.data(), t.dtype, i, v); }
  /// Fill with NaN so unwritten elements show.
  void poison() {
    for (size_t i = 0; i < size(); ++i) set(i, std::nanf(""));
  }
  std::vector<double> values() const {
    std::vector<double> v(size());
    for (size_t i = 0; i < v.size(); ++i) v[i] = get(i);
    return v;
  }
};

/// Random N(0,1) activations in `dtype`.
inline Mat random_mat(int64_t rows, int64_t cols, DLDataType dtype, uint32_t seed) {
  Mat m(rows, cols, dtype);
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (size_t i = 0; i < m.size(); ++i) m.set(i, nd(rng));
  return m;
}

/// ‖y − ref‖ / ‖ref‖, and the count of non-finite outputs.
inline double rel_err(const Mat& y, const std::vector<double>& ref, size_t* non_finite = nullptr) {
  double num = 0, den = 0;
  size_t bad = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    double v = y.get(i);
    if (!std::isfinite(v)) ++bad;
    num += (v - ref[i]) * (v - ref[i]);
    den += ref[i] * ref[i];
  }
  if (non_finite) *non_finite = bad;
  return std::sqrt(num / std::max(den, 1e-300));
}

/// float64 reference of a decoded linear layer.
inline std::vector<double> linear_ref(const CanonicalWeight& w, const Mat& x) {
  const int64_t M = x.shape[0];
  std::vector<double> y(size_t(M * w.N));
  for (int64_t n = 0; n < w.N; ++n) {
    std::vector<double> row(static_cast<size_t>(w.K));
    for (int64_t k = 0; k < w.K; ++k) row[size_t(k)] = w.dequant(n, k);
    for (int64_t m = 0; m < M; ++m) {
      double acc = w.bias_at(n);
      for (int64_t k = 0; k < w.K; ++k) acc += x.get(size_t(m * w.K + k)) * row[size_t(k)];
      y[size_t(m * w.N + n)] = acc;
    }
  }
  return y;
}

/// Whether `backend` (loaded by `rt`) has a w4a16 MoE kernel.
inline bool has_moe_kernel(const Runtime& rt, const std::string& backend) {
  const BackendInfo* b = rt.registry().find(backend);
  if (!b) return false;
  for (const auto& k : b->kernels)
    if (k.op == NIBBLE_OP_MOE && k.mode == NIBBLE_MODE_W4A16) return true;
  return false;
}

/// The declared bound of the kernel behind a placement for activation dtype `d`.
inline double declared_bound(const Runtime& rt, const Placement& p, DLDataType d) {
  for (const auto& k : rt.registry().find(p.backend)->kernels)
    if (k.name == p.kernel)
      return d.bits == 32 ? k.bound_f32 : d.code == kDLBfloat ? k.bound_bf16 : k.bound_f16;
  return 0;
}

}  // namespace nibble::test
