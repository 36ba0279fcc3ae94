// Packing into the general layout: q words along K per output (so a warp's 32 outputs read 128
// contiguous bytes), scales widened exactly to fp32, zero points as bytes, a group per channel.
#include "general_weight.hpp"

#include <string>
#include <vector>

namespace nibble::cuda {

GeneralWeight::GeneralWeight(int device, const sdk::QuantWeight& w) {
  const int bits = w.bits(), pack = 32 / bits;
  const int64_t K = w.K(), N = w.N(), G = w.num_groups(), words = (K + pack - 1) / pack;
  const uint32_t max_q = (1u << bits) - 1u;
  std::vector<uint32_t> q(size_t(words * N), 0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) {
      const uint32_t v = w.q(n, k);
      if (v > max_q)
        throw sdk::PluginError(
            NIBBLE_INVALID_ARGUMENT,
            "q value " + std::to_string(v) + " does not fit " + std::to_string(bits) + " bits");
      q[size_t((k / pack) * N + n)] |= v << (bits * (k % pack));
    }
  std::vector<float> scales(size_t(G * N));
  std::vector<uint8_t> zeros(size_t(G * N));
  for (int64_t g = 0; g < G; ++g)
    for (int64_t n = 0; n < N; ++n) {
      scales[size_t(g * N + n)] = w.scale(g, n);
      zeros[size_t(g * N + n)] = w.zero(g, n);
    }
  std::vector<int32_t> groups(static_cast<size_t>(K));
  for (int64_t k = 0; k < K; ++k) {
    const int64_t g = w.group(k);
    sdk::require(g >= 0 && g < G, "g_idx[" + std::to_string(k) + "] = " + std::to_string(g) +
                                      " is outside [0, " + std::to_string(G) + ")");
    groups[size_t(k)] = int32_t(g);
  }
  qweight_ = DeviceBuffer::upload(device, q);
  scales_ = DeviceBuffer::upload(device, scales);
  zeros_ = DeviceBuffer::upload(device, zeros);
  groups_ = DeviceBuffer::upload(device, groups);
  view_.qweight = qweight_.as<const uint32_t>();
  view_.scales = scales_.as<const float>();
  view_.zeros = zeros_.as<const uint8_t>();
  view_.groups = groups_.as<const int32_t>();
  view_.bits = bits;
  view_.K = K;
  view_.N = N;
}

}  // namespace nibble::cuda
