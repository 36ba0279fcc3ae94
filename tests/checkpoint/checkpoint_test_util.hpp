// Helpers for the checkpoint tests: fixture paths, temporary directories, random canonical
// weights, encoded layers and error-message assertions.
#pragma once

#include <nibble/canonical_weight.hpp>
#include <nibble/checkpoint_scheme.hpp>
#include <nibble/error.hpp>
#include <nibble/safetensors.hpp>
#include <nibble/sdk/numeric.hpp>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace nibble::test {

/// tests/data (malformed inputs; the upstream-packed fixtures are in fixtures_dir()).
inline std::filesystem::path data_dir() {
  if (const char* env = std::getenv("NIBBLE_TEST_DATA")) return env;
  return NIBBLE_TEST_DATA_DIR;
}

/// The upstream-packed fixtures (conformance/fixtures), which the conformance kit ships too.
inline std::filesystem::path fixtures_dir() { return NIBBLE_FIXTURES_DIR; }

/// A fresh directory removed when the object dies.
class TempDir {
 public:
  TempDir() {
    static std::mt19937_64 rng(std::random_device{}());
    path_ = std::filesystem::temp_directory_path() / ("nibble_ckpt_test_" + std::to_string(rng()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

/// Write `text` to `path`.
inline void write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

/// Read a whole file.
inline std::vector<std::byte> read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> c((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(c.size());
  std::memcpy(out.data(), c.data(), c.size());
  return out;
}

/// The message of the nibble::Error `fn` throws; fails the test when it throws nothing.
inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const nibble::Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw a non-nibble exception: " << e.what();
    return e.what();
  }
  ADD_FAILURE() << "expected a nibble::Error, nothing was thrown";
  return "";
}

/// Assert that `message` contains every string of `parts`.
inline void expect_mentions(const std::string& message, std::initializer_list<std::string> parts) {
  for (const auto& p : parts)
    EXPECT_NE(message.find(p), std::string::npos) << "message lacks \"" << p << "\": " << message;
}

/// Options for a random canonical weight.
struct RandomWeightSpec {
  int bits = 4;
  int group_size = 128;
  int64_t K = 256;
  int64_t N = 64;
  bool sym = false;
  bool act_order = false;
  int zero_min = 0;  ///< asymmetric zero points drawn from [zero_min, zero_max]
  int zero_max = 15;
  DLDataType scales_dtype = sdk::dtype_f16();
  bool bias = false;
};

/// A random, valid canonical weight (values never all zero).
inline CanonicalWeight random_weight(std::mt19937_64& rng, const RandomWeightSpec& s) {
  CanonicalWeight w;
  w.bits = s.bits;
  w.group_size = s.group_size;
  w.K = s.K;
  w.N = s.N;
  w.num_groups = groups_for(s.K, s.group_size);
  const int maxq = (1 << s.bits) - 1;
  std::uniform_int_distribution<int> qd(0, maxq), zd(s.zero_min, s.zero_max);
  w.q.resize(size_t(s.N * s.K));
  for (auto& v : w.q) v = uint8_t(qd(rng));
  w.zeros.resize(size_t(w.num_groups * s.N));
  for (auto& z : w.zeros) z = uint8_t(s.sym ? (1 << (s.bits - 1)) : zd(rng));
  w.scales_dtype = s.scales_dtype;
  w.scales.resize(size_t(w.num_groups * s.N) * sdk::dtype_bytes(s.scales_dtype));
  std::uniform_real_distribution<float> sd(1e-3f, 0.1f);
  for (size_t i = 0; i < size_t(w.num_groups * s.N); ++i)
    sdk::store_float(w.scales.data(), s.scales_dtype, i, sd(rng));
  if (s.act_order && s.group_size != -1) {
    std::vector<int32_t> perm(static_cast<size_t>(s.K));
    std::iota(perm.begin(), perm.end(), 0);
    do {
      std::shuffle(perm.begin(), perm.end(), rng);
      w.g_idx.assign(size_t(s.K), 0);
      for (int64_t i = 0; i < s.K; ++i)
        w.g_idx[size_t(perm[size_t(i)])] = int32_t(i / s.group_size);
    } while (is_identity_grouping(w.g_idx, s.group_size));
  }
  if (s.bias) {
    w.bias_dtype = sdk::dtype_f16();
    w.bias.resize(size_t(s.N) * 2);
    std::normal_distribution<float> bd(0.f, 0.1f);
    for (int64_t n = 0; n < s.N; ++n)
      sdk::store_float(w.bias.data(), w.bias_dtype, size_t(n), bd(rng));
  }
  return w;
}

/// Field-by-field equality of two canonical weights (bit-exact).
inline void expect_same_weight(const CanonicalWeight& a, const CanonicalWeight& b) {
  EXPECT_EQ(a.bits, b.bits);
  EXPECT_EQ(a.group_size, b.group_size);
  EXPECT_EQ(a.K, b.K);
  EXPECT_EQ(a.N, b.N);
  EXPECT_EQ(a.num_groups, b.num_groups);
  EXPECT_TRUE(a.q == b.q) << "q differs";
  EXPECT_TRUE(a.zeros == b.zeros) << "zeros differ";
  EXPECT_TRUE(a.scales == b.scales) << "scales differ";
  EXPECT_TRUE(sdk::same_dtype(a.scales_dtype, b.scales_dtype));
  EXPECT_TRUE(a.g_idx == b.g_idx) << "g_idx differs";
  EXPECT_TRUE(a.bias == b.bias) << "bias differs";
  if (!a.bias.empty()) {
    EXPECT_TRUE(sdk::same_dtype(a.bias_dtype, b.bias_dtype));
  }
}

/// A tensor of a file as doubles (F32/F16/BF16/F64).
inline std::vector<double> as_doubles(const TensorView& t) {
  std::vector<double> v(size_t(t.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = t.as_double(i);
  return v;
}

/// ‖a − b‖ / ‖b‖.
inline double rel_error(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / den);
}

/// y[m][n] = Σ_k x[m][k] · W[n][k] + b[n] in float64 from the canonical weight.
inline std::vector<double> matmul(const CanonicalWeight& w, const std::vector<double>& x,
                                  int64_t M) {
  std::vector<double> y(size_t(M * w.N));
  for (int64_t n = 0; n < w.N; ++n) {
    for (int64_t m = 0; m < M; ++m) {
      double acc = 0;
      for (int64_t k = 0; k < w.K; ++k) acc += x[size_t(m * w.K + k)] * w.dequant(n, k);
      y[size_t(m * w.N + n)] = acc + w.bias_at(n);
    }
  }
  return y;
}

/// Views of encoded tensors, as a checkpoint would hand them to a scheme's decode(); the tensors
/// are named `prefix`.<suffix>.
struct Encoded {
  std::map<std::string, OwnedTensor> tensors;
  std::map<std::string, TensorView> views;
  LayerTensors layer;
  explicit Encoded(std::map<std::string, OwnedTensor> t, const std::string& prefix = "layer")
      : tensors(std::move(t)) {
    for (const auto& [suffix, tensor] : tensors) views[suffix] = tensor.view(prefix + "." + suffix);
    layer.prefix = prefix;
    auto get = [&](const char* s) { return views.count(s) ? &views[s] : nullptr; };
    layer.qweight = get("qweight");
    layer.qzeros = get("qzeros");
    layer.scales = get("scales");
    layer.g_idx = get("g_idx");
    layer.bias = get("bias");
  }
};

/// How many of w's dequantized values differ from `expected` ([N][K] row-major).
inline int64_t dequant_mismatches(const CanonicalWeight& w, const TensorView& expected) {
  int64_t mismatches = 0;
  for (int64_t n = 0; n < w.N; ++n)
    for (int64_t k = 0; k < w.K; ++k)
      mismatches += w.dequant(n, k) != expected.as_double(size_t(n * w.K + k));
  return mismatches;
}

/// Round every value to float (what the fixtures store) and back.
inline std::vector<double> to_f32(std::vector<double> v) {
  for (double& x : v) x = double(float(x));
  return v;
}

}  // namespace nibble::test
