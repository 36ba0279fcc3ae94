// Read-only helpers over the canonical weight (plugin.h): group lookup, scales as float, checks
// a plugin runs at prepare. Header-only.
#pragma once

#include <nibble/sdk/numeric.hpp>
#include <nibble/sdk/plugin.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace nibble::sdk {

/// A borrowed, checked view of a nibble_canonical_weight.
class QuantWeight {
 public:
  /// Check the weight's fields (sizes, bits, group layout) and view it; `what` names it.
  QuantWeight(const nibble_canonical_weight& w, const std::string& what) : w_(w) {
    require(w.bits == 4 || w.bits == 8,
            what + ": bits " + std::to_string(w.bits) + " (expected 4 or 8)");
    require(w.K > 0 && w.N > 0, what + ": empty weight");
    require(w.q && w.scales && w.zeros, what + ": q, scales or zeros is null");
    require(w.num_groups >= 1, what + ": num_groups < 1");
    require(w.group_size == -1 || w.group_size > 0,
            what + ": group_size " + std::to_string(w.group_size));
    if (!w.g_idx) {
      int64_t expect = w.group_size == -1 ? 1 : (w.K + w.group_size - 1) / w.group_size;
      require(w.num_groups == expect, what + ": num_groups " + std::to_string(w.num_groups) +
                                          ", expected " + std::to_string(expect));
    }
    require(is_float_dtype(w.scales_dtype), what + ": scales dtype " + dtype_name(w.scales_dtype));
    require(!w.bias || is_float_dtype(w.bias_dtype),
            what + ": bias dtype " + dtype_name(w.bias_dtype));
  }

  int bits() const { return w_.bits; }
  int group_size() const { return w_.group_size; }
  int64_t K() const { return w_.K; }
  int64_t N() const { return w_.N; }
  int64_t num_groups() const { return w_.num_groups; }
  bool has_g_idx() const { return w_.g_idx != nullptr; }
  bool has_bias() const { return w_.bias != nullptr; }

  /// Group of input channel k.
  int64_t group(int64_t k) const {
    if (w_.g_idx) return w_.g_idx[k];
    return w_.group_size == -1 ? 0 : k / w_.group_size;
  }
  /// Quantized value of (n, k).
  uint8_t q(int64_t n, int64_t k) const { return w_.q[size_t(n) * size_t(w_.K) + size_t(k)]; }
  /// Zero point of (group g, output n).
  uint8_t zero(int64_t g, int64_t n) const {
    return w_.zeros[size_t(g) * size_t(w_.N) + size_t(n)];
  }
  /// Scale of (group g, output n) as float (exact from f16/bf16).
  float scale(int64_t g, int64_t n) const {
    return load_float(w_.scales, w_.scales_dtype, size_t(g) * size_t(w_.N) + size_t(n));
  }
  /// Bias of output n as float, 0 without bias.
  float bias(int64_t n) const {
    return w_.bias ? load_float(w_.bias, w_.bias_dtype, size_t(n)) : 0.f;
  }
  /// Dequantized weight (n, k) = (q − zero) · scale, in float (exact: small int times f16).
  float dequant(int64_t n, int64_t k) const {
    int64_t g = group(k);
    return float(int(q(n, k)) - int(zero(g, n))) * scale(g, n);
  }
  /// The raw C struct.
  const nibble_canonical_weight& raw() const { return w_; }

 private:
  nibble_canonical_weight w_;
};

/// A stable permutation of input channels that sorts them by group (act-order → contiguous
/// groups); identity when the weight has no g_idx.
inline std::vector<int32_t> channels_sorted_by_group(const QuantWeight& w) {
  std::vector<int32_t> perm(size_t(w.K()));
  std::vector<int64_t> count(size_t(w.num_groups()) + 1, 0);
  for (int64_t k = 0; k < w.K(); ++k) {
    int64_t g = w.group(k);
    require(g >= 0 && g < w.num_groups(), "g_idx[" + std::to_string(k) +
                                              "] = " + std::to_string(g) + " is outside [0, " +
                                              std::to_string(w.num_groups()) + ")");
    ++count[size_t(g) + 1];
  }
  for (size_t g = 1; g < count.size(); ++g) count[g] += count[g - 1];
  for (int64_t k = 0; k < w.K(); ++k) perm[size_t(count[size_t(w.group(k))]++)] = int32_t(k);
  return perm;
}

}  // namespace nibble::sdk
