// The one builder of layer descriptors (nibble_layer_desc) from the weights a host lends: struct
// size stamped, the layout read off the canonical weight, and the promises a kernel may rely on
// (symmetry, the largest zero point) made only from weights actually seen. Header-only.
#pragma once

#include <nibble/sdk/plugin.h>
#include <nibble/sdk/host/abi_namespace.hpp>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace nibble::sdk::host {
inline namespace NIBBLE_SDK_HOST_ABI_NAMESPACE {

/// Every activation dtype a host may pass at forward.
constexpr uint32_t kAllActivationDtypes = NIBBLE_DTYPE_F32 | NIBBLE_DTYPE_F16 | NIBBLE_DTYPE_BF16;

/// Whether every zero point of `w` equals 2^(bits-1).
inline bool symmetric(const nibble_canonical_weight& w) {
  const uint8_t half = uint8_t(1u << (w.bits - 1));
  const size_t n = size_t(w.num_groups) * size_t(w.N);
  return std::all_of(w.zeros, w.zeros + n, [&](uint8_t z) { return z == half; });
}

/// The largest zero point of `w` (0 for an empty weight).
inline int32_t max_zero(const nibble_canonical_weight& w) {
  const size_t n = size_t(w.num_groups) * size_t(w.N);
  return n == 0 ? 0 : int32_t(*std::max_element(w.zeros, w.zeros + n));
}

/// The descriptor of a quantized linear layer over `w`, named `name` (borrowed).
inline nibble_layer_desc linear_desc(const nibble_canonical_weight& w, const char* name,
                                     int32_t mode = NIBBLE_MODE_W4A16,
                                     uint32_t act_dtypes = kAllActivationDtypes) {
  nibble_layer_desc d{};
  d.struct_size = sizeof d;
  d.op = NIBBLE_OP_LINEAR;
  d.name = name;
  d.K = w.K;
  d.N = w.N;
  d.bits = w.bits;
  d.group_size = w.group_size;
  d.has_g_idx = w.g_idx ? 1 : 0;
  d.symmetric = symmetric(w) ? 1 : 0;
  d.has_bias = w.bias ? 1 : 0;
  d.weight_dtype = w.scales_dtype;
  d.numeric_mode = mode;
  d.act_dtypes = act_dtypes;
#if NIBBLE_ABI_MINOR >= 1
  d.max_zero = max_zero(w);
#endif
  return d;
}

/// The descriptor of a dense (unquantized) layer over `w`, named `name` (borrowed).
inline nibble_layer_desc dense_desc(const nibble_dense_weight& w, const char* name,
                                    uint32_t act_dtypes = kAllActivationDtypes) {
  nibble_layer_desc d{};
  d.struct_size = sizeof d;
  d.op = NIBBLE_OP_DENSE;
  d.name = name;
  d.K = w.K;
  d.N = w.N;
  d.group_size = -1;
  d.has_bias = w.bias ? 1 : 0;
  d.weight_dtype = w.dtype;
  d.numeric_mode = NIBBLE_MODE_FLOAT;
  d.act_dtypes = act_dtypes;
  return d;
}

/// What an MoE block is beyond its experts' weights.
struct MoeShape {
  int64_t hidden = 0;        ///< K: the block's input and output width
  int64_t intermediate = 0;  ///< I: one expert's width (w13 is [2I][K], w2 [K][I])
  int32_t num_experts = 0;
  int32_t top_k = 0;
};

/// The descriptor of an MoE block from the experts the host has at hand: w13[e] and w2[e] for
/// the first w13.size() experts (at least one). The layout comes from expert 0. A block is
/// symmetric only when every expert is, and the largest zero points are known only from every
/// expert, so with fewer experts than shape.num_experts neither is claimed (symmetric 0,
/// max_zero 0 = unknown); act-order is set when any expert given has a g_idx.
inline nibble_layer_desc moe_desc(const MoeShape& shape,
                                  const std::vector<nibble_canonical_weight>& w13,
                                  const std::vector<nibble_canonical_weight>& w2, const char* name,
                                  int32_t mode = NIBBLE_MODE_W4A16,
                                  uint32_t act_dtypes = kAllActivationDtypes) {
  nibble_layer_desc d = linear_desc(w13.at(0), name, mode, act_dtypes);
  d.op = NIBBLE_OP_MOE;
  d.K = shape.hidden;
  d.N = shape.intermediate;
  d.has_bias = 0;
  d.num_experts = shape.num_experts;
  d.top_k = shape.top_k;
  d.activation = NIBBLE_ACT_SILU;
  d.w2_group_size = w2.at(0).group_size;
  const bool every_expert =
      w13.size() == size_t(shape.num_experts) && w2.size() == size_t(shape.num_experts);
  bool sym13 = every_expert, sym2 = every_expert;
  int32_t z13 = 0, z2 = 0;
  for (size_t e = 0; e < w13.size(); ++e) {
    d.has_g_idx = d.has_g_idx || w13[e].g_idx ? 1 : 0;
    sym13 = sym13 && symmetric(w13[e]);
    z13 = std::max(z13, max_zero(w13[e]));
  }
  for (size_t e = 0; e < w2.size(); ++e) {
    d.w2_has_g_idx = d.w2_has_g_idx || w2[e].g_idx ? 1 : 0;
    sym2 = sym2 && symmetric(w2[e]);
    z2 = std::max(z2, max_zero(w2[e]));
  }
  d.symmetric = sym13 ? 1 : 0;
  d.w2_symmetric = sym2 ? 1 : 0;
#if NIBBLE_ABI_MINOR >= 1
  d.max_zero = every_expert ? z13 : 0;
  d.w2_max_zero = every_expert ? z2 : 0;
#else
  (void)z13;
  (void)z2;
#endif
  return d;
}

}  // namespace NIBBLE_SDK_HOST_ABI_NAMESPACE
}  // namespace nibble::sdk::host
