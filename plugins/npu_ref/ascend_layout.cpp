// Repacking a canonical weight into the Ascend layout (see ascend_layout.hpp).
#include "ascend_layout.hpp"

#include <string>

namespace nibble::npu_ref {

namespace {

// Two's-complement int4 in the low or high nibble: even outputs low, odd outputs high, as
// npu_convert_weight_to_int4pack pairs neighbours along N.
void store_int4(uint8_t& byte, int64_t n, int value) {
  const uint8_t nibble = uint8_t(value) & 0xFu;
  byte = (n % 2 == 0) ? uint8_t((byte & 0xF0u) | nibble) : uint8_t((byte & 0x0Fu) | (nibble << 4));
}

}  // namespace

AscendWeight AscendWeight::pack(const sdk::QuantWeight& w) {
  AscendWeight a;
  a.bits_ = w.bits();
  a.K_ = w.K();
  a.N_ = w.N();
  const int mid = 1 << (w.bits() - 1);
  const int max_q = (1 << w.bits()) - 1;
  const int64_t K = a.K_, N = a.N_, G = w.num_groups();

  const std::vector<int32_t> order = sdk::channels_sorted_by_group(w);
  bool identity = true;
  for (int64_t k = 0; k < K; ++k) identity = identity && order[size_t(k)] == k;
  if (!identity) a.columns_ = order;

  std::vector<int64_t> group_starts;
  for (int64_t k = 0; k < K; ++k)
    if (k == 0 || w.group(order[size_t(k)]) != w.group(order[size_t(k - 1)]))
      group_starts.push_back(k);
  a.chunks_ = sdk::portable::split_chunks(K, group_starts);
  for (const auto& c : a.chunks_) a.chunk_group_.push_back(w.group(order[size_t(c.begin)]));

  a.row_bytes_ = a.bits_ == 8 ? N : (N + 1) / 2;
  a.weight_.assign(size_t(K * a.row_bytes_), 0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) {
      const int q = w.q(n, order[size_t(k)]);
      if (q > max_q)
        throw sdk::PluginError(NIBBLE_INVALID_ARGUMENT,
                               "q[" + std::to_string(n) + "][" + std::to_string(order[size_t(k)]) +
                                   "] = " + std::to_string(q) + " does not fit " +
                                   std::to_string(w.bits()) + " bits");
      uint8_t* row = &a.weight_[size_t(k * a.row_bytes_)];
      if (a.bits_ == 8)
        row[n] = uint8_t(int8_t(q - mid));
      else
        store_int4(row[n / 2], n, q - mid);
    }

  a.scale_.resize(size_t(G * N));
  a.offset_.resize(size_t(G * N));
  for (int64_t g = 0; g < G; ++g)
    for (int64_t n = 0; n < N; ++n) {
      const int z = w.zero(g, n);
      // 4-bit GPTQ v1 can decode a stored 0xF to z_eff = 16: offset -8, so w + offset reaches -16.
      if (z > 2 * mid)
        throw sdk::PluginError(NIBBLE_INVALID_ARGUMENT, "zero point " + std::to_string(z) +
                                                            " at group " + std::to_string(g) +
                                                            ", output " + std::to_string(n) +
                                                            " exceeds 2^bits");
      a.scale_[size_t(g * N + n)] = w.scale(g, n);
      a.offset_[size_t(g * N + n)] = float(mid - z);
    }
  return a;
}

int AscendWeight::centred(int64_t k, int64_t n) const {
  const uint8_t* row = &weight_[size_t(k * row_bytes_)];
  if (bits_ == 8) return int8_t(row[n]);
  const uint8_t byte = row[n / 2];
  // Arithmetic shifts sign-extend the nibble.
  return n % 2 == 0 ? int8_t(uint8_t(byte << 4)) >> 4 : int8_t(byte) >> 4;
}

size_t AscendWeight::bytes() const {
  return weight_.size() + (scale_.size() + offset_.size()) * sizeof(float) +
         columns_.size() * sizeof(int32_t);
}

}  // namespace nibble::npu_ref
