// Fusing gate and up into w13: q rows gate then up; scales, zeros and bias rows per group likewise.
#include "fuse_w13.hpp"

#include <nibble/error.hpp>
#include <nibble/sdk/numeric.hpp>

#include <fmt/format.h>

#include <cstring>

namespace nibble::detail {

CanonicalWeight fuse_w13(CanonicalWeight gate, const CanonicalWeight& up, const std::string& what) {
  auto mismatch = [&](const char* field, auto a, auto b) {
    if (a != b) {
      throw Error(
          fmt::format("{}: gate and up projections differ in {} ({} vs {}); nibble fuses them "
                      "into one w13 weight and needs them equal",
                      what, field, a, b));
    }
  };
  mismatch("K", gate.K, up.K);
  mismatch("N", gate.N, up.N);
  mismatch("bits", gate.bits, up.bits);
  mismatch("group_size", gate.group_size, up.group_size);
  mismatch("num_groups", gate.num_groups, up.num_groups);
  mismatch("scales dtype", sdk::dtype_name(gate.scales_dtype), sdk::dtype_name(up.scales_dtype));
  mismatch("bias presence", gate.bias.empty(), up.bias.empty());
  if (gate.g_idx != up.g_idx) {
    throw Error(
        fmt::format("{}: gate and up projections use different g_idx groupings; nibble "
                    "fuses them into one w13 weight with a single g_idx",
                    what));
  }
  const int64_t I = gate.N, G = gate.num_groups;
  const size_t sb = sdk::dtype_bytes(gate.scales_dtype);
  CanonicalWeight w = std::move(gate);
  w.N = 2 * I;
  w.q.insert(w.q.end(), up.q.begin(), up.q.end());
  std::vector<uint8_t> zeros(size_t(G * 2 * I)), scales(size_t(G * 2 * I) * sb);
  for (int64_t g = 0; g < G; ++g) {
    std::memcpy(&zeros[size_t(g * 2 * I)], &w.zeros[size_t(g * I)], size_t(I));
    std::memcpy(&zeros[size_t(g * 2 * I + I)], &up.zeros[size_t(g * I)], size_t(I));
    std::memcpy(&scales[size_t(g * 2 * I) * sb], &w.scales[size_t(g * I) * sb], size_t(I) * sb);
    std::memcpy(&scales[size_t(g * 2 * I + I) * sb], &up.scales[size_t(g * I) * sb],
                size_t(I) * sb);
  }
  w.zeros = std::move(zeros);
  w.scales = std::move(scales);
  if (!w.bias.empty()) {
    mismatch("bias dtype", sdk::dtype_name(w.bias_dtype), sdk::dtype_name(up.bias_dtype));
    w.bias.insert(w.bias.end(), up.bias.begin(), up.bias.end());
  }
  return w;
}

}  // namespace nibble::detail
