// The owning form of the SDK's canonical quantized weight (sdk/include/nibble/sdk/plugin.h): what
// every scheme decodes a checkpoint layer into, and what every kernel repacks from.
#pragma once

#include <nibble/sdk/plugin.h>
#include <nibble/export.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace nibble {

/// One quantized linear layer, K inputs and N outputs, in canonical form:
///   W[n][k] = (q[n*K + k] - zeros[g(k)*N + n]) * scales[g(k)*N + n],
///   g(k) = g_idx.empty() ? (group_size == -1 ? 0 : k / group_size) : g_idx[k].
struct NIBBLE_API CanonicalWeight {
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

  /// A borrowed C view for a plugin's `prepare`; valid while this object lives unchanged.
  nibble_canonical_weight view() const;
  /// Group of input channel k.
  int64_t group_of(int64_t k) const;
  /// Scale of (group g, output n), widened exactly to double.
  double scale(int64_t g, int64_t n) const;
  /// Bias of output n as double (0 without bias).
  double bias_at(int64_t n) const;
  /// Dequantized weight (n, k) = (q - zero) * scale, exact in double.
  double dequant(int64_t n, int64_t k) const;
  /// Whether every zero point equals 2^(bits-1).
  bool symmetric() const;
  /// Throws nibble::Error (naming `what`) unless sizes, value ranges and g_idx are consistent.
  void validate(const std::string& what) const;
};

/// Number of groups a layer with K inputs has for `group_size` (-1: one).
NIBBLE_API int64_t groups_for(int64_t K, int group_size);

/// True when g_idx[k] == k / group_size for every k (act-order that costs nothing).
NIBBLE_API bool is_identity_grouping(const std::vector<int32_t>& g_idx, int group_size);

}  // namespace nibble
