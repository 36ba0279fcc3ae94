// The owning form of the canonical quantized weight (plugin.h's nibble_canonical_weight): what a
// host decodes a checkpoint layer into, or draws at random, and lends to a kernel's prepare. The
// one owned type for the core, the conformance kit, the bench and the tests. Header-only.
#pragma once

#include <nibble/sdk/plugin.h>
#include <nibble/sdk/numeric.hpp>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace nibble::sdk::host {

/// One quantized linear layer, K inputs and N outputs, in canonical form:
///   W[n][k] = (q[n*K + k] - zeros[g(k)*N + n]) * scales[g(k)*N + n],
///   g(k) = g_idx.empty() ? (group_size == -1 ? 0 : k / group_size) : g_idx[k].
/// No ABI minor changes this layout, so it lives outside the minor-keyed namespace.
struct CanonicalWeight {
  int bits = 4;            ///< 4 or 8
  int group_size = -1;     ///< > 0, or -1 for one group spanning all of K
  int64_t K = 0;           ///< input channels
  int64_t N = 0;           ///< output channels
  int64_t num_groups = 0;  ///< rows of scales and zeros
  std::vector<uint8_t> q;  ///< [N][K], one unsigned value (0 .. 2^bits - 1) per byte
  /// [num_groups][N] effective zero points (GPTQ v1's stored + 1 already applied, so a 4-bit v1
  /// checkpoint may hold 16 here).
  std::vector<uint8_t> zeros;
  std::vector<uint8_t> scales;  ///< [num_groups][N] raw bytes of dtype scales_dtype
  DLDataType scales_dtype{kDLFloat, 16, 1};
  std::vector<int32_t> g_idx;  ///< [K] group of each input channel; empty = identity grouping
  std::vector<uint8_t> bias;   ///< [N] raw bytes of dtype bias_dtype; empty = no bias
  DLDataType bias_dtype{kDLFloat, 16, 1};

  /// A borrowed C view for a kernel's `prepare`; valid while this object lives unchanged.
  nibble_canonical_weight view() const {
    nibble_canonical_weight v{};
    v.struct_size = sizeof v;
    v.bits = bits;
    v.group_size = group_size;
    v.K = K;
    v.N = N;
    v.num_groups = num_groups;
    v.q = q.data();
    v.scales = scales.data();
    v.scales_dtype = scales_dtype;
    v.zeros = zeros.data();
    v.g_idx = g_idx.empty() ? nullptr : g_idx.data();
    v.bias = bias.empty() ? nullptr : bias.data();
    v.bias_dtype = bias_dtype;
    return v;
  }
  /// Group of input channel k.
  int64_t group_of(int64_t k) const {
    if (!g_idx.empty()) return g_idx[size_t(k)];
    return group_size == -1 ? 0 : k / group_size;
  }
  /// Scale of (group g, output n), widened exactly to double.
  double scale(int64_t g, int64_t n) const {
    return load_float(scales.data(), scales_dtype, size_t(g) * size_t(N) + size_t(n));
  }
  /// Set the scale of (group g, output n), rounded to scales_dtype (scales must be sized).
  void set_scale(int64_t g, int64_t n, float value) {
    store_float(scales.data(), scales_dtype, size_t(g) * size_t(N) + size_t(n), value);
  }
  /// Bias of output n as double (0 without bias).
  double bias_at(int64_t n) const {
    return bias.empty() ? 0.0 : double(load_float(bias.data(), bias_dtype, size_t(n)));
  }
  /// Dequantized weight (n, k) = (q - zero) * scale, exact in double.
  double dequant(int64_t n, int64_t k) const {
    const int64_t g = group_of(k);
    return (double(q[size_t(n) * size_t(K) + size_t(k)]) -
            double(zeros[size_t(g) * size_t(N) + size_t(n)])) *
           scale(g, n);
  }
  /// Whether every zero point equals 2^(bits-1).
  bool symmetric() const {
    const uint8_t half = uint8_t(1u << (bits - 1));
    return std::all_of(zeros.begin(), zeros.end(), [&](uint8_t z) { return z == half; });
  }
};

}  // namespace nibble::sdk::host
