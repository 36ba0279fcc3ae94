// Repacking a canonical weight into the Marlin layout (see marlin_layout.hpp). The permutations
// are built exactly as vLLM's marlin_utils builds them, from the mma fragment each thread owns.
#include "marlin_layout.hpp"

#include <algorithm>

namespace nibble::gpu_ref {

std::array<int, kMarlinRun> marlin_weight_perm(int bits) {
  std::vector<int> perm;
  perm.reserve(kMarlinRun);
  for (int i = 0; i < 32; ++i) {
    std::vector<int> fragment;
    const int col = i / 4;
    for (int block : {0, 1})
      for (int row : {2 * (i % 4), 2 * (i % 4) + 1, 2 * (i % 4 + 4), 2 * (i % 4 + 4) + 1})
        fragment.push_back(16 * row + col + 8 * block);
    for (int j = 0; j < 4; ++j)
      for (int p : fragment) perm.push_back(p + 256 * j);
  }
  const std::vector<int> interleave = marlin_interleave(bits);
  const size_t L = interleave.size();
  std::array<int, kMarlinRun> out{};
  for (size_t c = 0; c < size_t(kMarlinRun); ++c)
    out[c] = perm[(c / L) * L + size_t(interleave[c % L])];
  return out;
}

std::array<int, 64> marlin_scale_perm() {
  std::array<int, 64> p{};
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 8; ++j) p[size_t(8 * i + j)] = i + 8 * j;
  return p;
}

std::array<int, 32> marlin_scale_perm_single() {
  std::array<int, 32> p{};
  const int offsets[8] = {0, 1, 8, 9, 16, 17, 24, 25};
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 8; ++j) p[size_t(8 * i + j)] = 2 * i + offsets[j];
  return p;
}

std::vector<int> marlin_interleave(int bits) {
  if (bits == 4) return {0, 2, 4, 6, 1, 3, 5, 7};
  if (bits == 8) return {0, 2, 1, 3};
  throw sdk::PluginError(NIBBLE_UNSUPPORTED,
                         "Marlin packs 4- or 8-bit values, not " + std::to_string(bits) + "-bit");
}

std::vector<uint32_t> marlin_repack(const std::vector<uint8_t>& q_kn, int64_t K, int64_t N,
                                    int bits) {
  sdk::require(K % kMarlinTile == 0 && N % kMarlinRunOutputs == 0,
               "marlin_repack: K % 16 and N % 64 must be 0");
  const std::array<int, kMarlinRun> perm = marlin_weight_perm(bits);
  const int64_t pack = 32 / bits, row_values = N * kMarlinTile;
  std::vector<uint32_t> out(size_t(K / kMarlinTile * row_values / pack), 0);
  for (int64_t kt = 0; kt < K / kMarlinTile; ++kt)
    for (int64_t c = 0; c < row_values; ++c) {
      // Tiled position (within this row of tiles) the packed position c takes its value from.
      const int64_t t = (c / kMarlinRun) * kMarlinRun + perm[size_t(c % kMarlinRun)];
      const int64_t n_tile = t / 256, k_in = (t % 256) / 16, n_in = t % 16;
      const uint32_t q = q_kn[size_t((kt * kMarlinTile + k_in) * N + n_tile * 16 + n_in)];
      out[size_t((kt * row_values + c) / pack)] |= q << (bits * (c % pack));
    }
  return out;
}

std::string marlin_why_not(int64_t K, int64_t N, int group_size, bool act_order, bool symmetric,
                           int bits, int max_zero, const std::string& what) {
  if (N % 64 != 0)
    return what + ": N = " + std::to_string(N) +
           " is not a multiple of 64 (Marlin's minimum thread tile of outputs)";
  if (K % 128 != 0)
    return what + ": K = " + std::to_string(K) +
           " is not a multiple of 128 (Marlin's minimum thread tile along K)";
  if (group_size != -1 && group_size != 32 && group_size != 64 && group_size != 128)
    return what + ": group size " + std::to_string(group_size) +
           " (Marlin supports -1, 32, 64 and 128)";
  if (group_size != -1 && K % group_size != 0)
    return what + ": K = " + std::to_string(K) + " is not a multiple of the group size " +
           std::to_string(group_size);
  if (act_order && !symmetric && group_size != -1)
    return what +
           ": act-order with zero points (Marlin's zero-point uint4/uint8 kernels, the "
           "AWQ form, have no act-order variant)";
  if (bits == 4 && max_zero > 15)
    return what + ": zero point " + std::to_string(max_zero) +
           " (GPTQ v1's stored 0xF) does not fit Marlin's uint4 zero points (0..15)";
  return "";
}

MarlinWeight MarlinWeight::pack(const sdk::QuantWeight& w) {
  MarlinWeight m;
  m.bits_ = w.bits();
  m.pack_ = 32 / w.bits();
  m.K_ = w.K();
  m.N_ = w.N();
  m.group_size_ = w.group_size();
  const int64_t K = m.K_, N = m.N_, G = w.num_groups();
  const int mid = 1 << (w.bits() - 1);
  const bool act_order = w.has_g_idx() && w.group_size() != -1;
  bool symmetric = true;
  int max_zero = 0;
  for (int64_t g = 0; g < G; ++g)
    for (int64_t n = 0; n < N; ++n) {
      symmetric = symmetric && w.zero(g, n) == mid;
      max_zero = std::max(max_zero, int(w.zero(g, n)));
    }
  const std::string why =
      marlin_why_not(K, N, w.group_size(), act_order, symmetric, w.bits(), max_zero, "weight");
  if (!why.empty()) throw sdk::PluginError(NIBBLE_UNSUPPORTED, why);
  // One group row takes Marlin's single-group scale order. Decided by the rows, not by
  // group_size >= K: a row-parallel act-order shard keeps every group of the full layer although
  // its own K may span one group or less.
  const bool single = G == 1;

  std::vector<int32_t> order(static_cast<size_t>(K));
  for (int64_t k = 0; k < K; ++k) order[size_t(k)] = int32_t(k);
  if (act_order) {
    order = sdk::channels_sorted_by_group(w);
    m.columns_ = order;
    for (int64_t k = 0; k < K; ++k) m.sorted_groups_.push_back(int32_t(w.group(order[size_t(k)])));
  }
  const int max_q = (1 << w.bits()) - 1;
  std::vector<uint8_t> q_kn(size_t(K * N));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) {
      const uint8_t q = w.q(n, order[size_t(k)]);
      if (q > max_q)
        throw sdk::PluginError(
            NIBBLE_INVALID_ARGUMENT,
            "q value " + std::to_string(q) + " does not fit " + std::to_string(w.bits()) + " bits");
      q_kn[size_t(k * N + n)] = q;
    }
  m.qweight_ = marlin_repack(q_kn, K, N, m.bits_);

  // Scales and their decode positions.
  const std::array<int, 64> sp = marlin_scale_perm();
  const std::array<int, 32> sps = marlin_scale_perm_single();
  std::array<int, 64> inverse64{};
  std::array<int, 32> inverse32{};
  for (int p = 0; p < 64; ++p) inverse64[size_t(sp[size_t(p)])] = p;
  for (int p = 0; p < 32; ++p) inverse32[size_t(sps[size_t(p)])] = p;
  m.scale_pos_.resize(size_t(N));
  for (int64_t n = 0; n < N; ++n)
    m.scale_pos_[size_t(n)] = single ? (n / 32) * 32 + inverse32[size_t(n % 32)]
                                     : (n / 64) * 64 + inverse64[size_t(n % 64)];
  m.scales_.resize(size_t(G * N));
  for (int64_t g = 0; g < G; ++g)
    for (int64_t n = 0; n < N; ++n)
      m.scales_[size_t(g * N + m.scale_pos_[size_t(n)])] = w.scale(g, n);

  // Zero points: scale_perm (never the single one), interleave, pack along N.
  if (!symmetric) {
    const std::vector<int> interleave = marlin_interleave(m.bits_);
    const int64_t L = int64_t(interleave.size()), words = N / m.pack_;
    std::vector<int> inverse_interleave(static_cast<size_t>(L));
    for (int64_t t = 0; t < L; ++t) inverse_interleave[size_t(interleave[size_t(t)])] = int(t);
    m.zp_word_.resize(size_t(N));
    m.zp_shift_.resize(size_t(N));
    for (int64_t n = 0; n < N; ++n) {
      const int64_t p = (n / 64) * 64 + inverse64[size_t(n % 64)];
      const int64_t t = (p / L) * L + inverse_interleave[size_t(p % L)];
      m.zp_word_[size_t(n)] = t / m.pack_;
      m.zp_shift_[size_t(n)] = int8_t(m.bits_ * (t % m.pack_));
    }
    m.zp_.assign(size_t(G * words), 0);
    for (int64_t g = 0; g < G; ++g)
      for (int64_t n = 0; n < N; ++n) {
        const int z = w.zero(g, n);
        if (z > max_q)
          throw sdk::PluginError(NIBBLE_UNSUPPORTED,
                                 "weight: zero point " + std::to_string(z) + " at group " +
                                     std::to_string(g) + ", output " + std::to_string(n) +
                                     " (a GPTQ v1 stored 0xF) does not fit Marlin's uint" +
                                     std::to_string(m.bits_) + " zero points (0.." +
                                     std::to_string(max_q) +
                                     "); gpu_ref's exllama kernel stores it");
        m.zp_[size_t(g * words + m.zp_word_[size_t(n)])] |= uint32_t(z) << m.zp_shift_[size_t(n)];
      }
  }

  const std::array<int, kMarlinRun> perm = marlin_weight_perm(m.bits_);
  for (int64_t c = 0; c < kMarlinRun; ++c) {
    const int o = perm[size_t(c)];
    m.run_row_[size_t(c)] = int16_t((o % 256) / 16);
    m.run_col_[size_t(c)] = int16_t((o / 256) * 16 + o % 16);
  }
  m.chunks_ = sdk::portable::split_chunks(K, {});
  return m;
}

size_t MarlinWeight::bytes() const {
  return (qweight_.size() + zp_.size()) * sizeof(uint32_t) + scales_.size() * sizeof(float) +
         (columns_.size() + sorted_groups_.size()) * sizeof(int32_t);
}

}  // namespace nibble::gpu_ref
