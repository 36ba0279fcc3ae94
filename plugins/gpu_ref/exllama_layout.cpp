// Repacking a canonical weight into the ExLlama layout (see exllama_layout.hpp).
#include "exllama_layout.hpp"

#include <algorithm>
#include <string>

namespace nibble::gpu_ref {

namespace {

// The zero_offset that stores every zero point of `w` in `bits` bits.
int choose_zero_offset(const sdk::QuantWeight& w) {
  const int top = 1 << w.bits();
  bool has_zero = false, has_top = false;
  for (int64_t g = 0; g < w.num_groups(); ++g)
    for (int64_t n = 0; n < w.N(); ++n) {
      const int z = w.zero(g, n);
      if (z > top)
        throw sdk::PluginError(NIBBLE_INVALID_ARGUMENT, "zero point " + std::to_string(z) +
                                                            " at group " + std::to_string(g) +
                                                            ", output " + std::to_string(n) +
                                                            " exceeds 2^bits");
      has_zero = has_zero || z == 0;
      has_top = has_top || z == top;
    }
  if (has_zero && has_top)
    throw sdk::PluginError(
        NIBBLE_UNSUPPORTED,
        "the ExLlama layout packs zero points in " + std::to_string(w.bits()) +
            " bits with one offset per layer (1 for GPTQ v1, 0 for v2); this weight "
            "has zero points of both 0 and " +
            std::to_string(top) + ", which no offset can store");
  return has_top ? 1 : 0;
}

}  // namespace

ExllamaWeight ExllamaWeight::pack(const sdk::QuantWeight& w) {
  ExllamaWeight e;
  e.bits_ = w.bits();
  e.pack_ = 32 / w.bits();
  e.N_ = w.N();
  e.zero_offset_ = choose_zero_offset(w);
  const int64_t K = w.K(), N = w.N(), G = w.num_groups(), pack = e.pack_;
  const int max_q = (1 << w.bits()) - 1;

  // q_perm, then each group's run padded to whole words (-1 = a zero activation).
  const std::vector<int32_t> q_perm = sdk::channels_sorted_by_group(w);
  std::vector<int64_t> group_starts;
  for (int64_t k = 0; k < K; ++k) {
    const bool starts = k == 0 || w.group(q_perm[size_t(k)]) != w.group(q_perm[size_t(k - 1)]);
    if (starts) {
      while (e.columns_.size() % size_t(pack) != 0) e.columns_.push_back(-1);
      group_starts.push_back(int64_t(e.columns_.size()));
    }
    e.columns_.push_back(q_perm[size_t(k)]);
  }
  while (e.columns_.size() % size_t(pack) != 0) e.columns_.push_back(-1);
  e.width_ = int64_t(e.columns_.size());
  bool identity = e.width_ == K;
  for (int64_t k = 0; identity && k < K; ++k) identity = e.columns_[size_t(k)] == k;
  std::vector<int32_t> columns = e.columns_;  // the packing below reads rows through it
  if (identity) e.columns_.clear();           // no gather needed: x is staged as it is
  e.chunks_ = sdk::portable::split_chunks(e.width_, group_starts);
  for (const auto& c : e.chunks_) {
    int64_t k = c.begin;
    while (columns[size_t(k)] < 0) ++k;  // a chunk starts inside one group's run
    e.chunk_group_.push_back(w.group(columns[size_t(k)]));
  }

  e.qweight_.assign(size_t(e.width_ / pack * N), 0);
  for (int64_t r = 0; r < e.width_ / pack; ++r)
    for (int p = 0; p < pack; ++p) {
      // 4-bit words are stored shuffled: position p holds row kShuffledRow[p] of the word.
      const int64_t row = r * pack + (e.bits_ == 4 ? kShuffledRow[p] : p);
      const int32_t src = columns[size_t(row)];
      if (src < 0) continue;
      for (int64_t n = 0; n < N; ++n) {
        const uint32_t q = w.q(n, src);
        if (int(q) > max_q)
          throw sdk::PluginError(NIBBLE_INVALID_ARGUMENT,
                                 "q[" + std::to_string(n) + "][" + std::to_string(src) +
                                     "] = " + std::to_string(q) + " does not fit " +
                                     std::to_string(e.bits_) + " bits");
        e.qweight_[size_t(r * N + n)] |= q << (e.bits_ * p);
      }
    }

  e.zero_words_ = (N + pack - 1) / pack;
  e.qzeros_.assign(size_t(G * e.zero_words_), 0);
  e.scales_.resize(size_t(G * N));
  for (int64_t g = 0; g < G; ++g)
    for (int64_t n = 0; n < N; ++n) {
      const uint32_t stored = uint32_t(w.zero(g, n) - e.zero_offset_);
      e.qzeros_[size_t(g * e.zero_words_ + n / pack)] |= stored << (e.bits_ * (n % pack));
      e.scales_[size_t(g * N + n)] = w.scale(g, n);
    }
  return e;
}

size_t ExllamaWeight::bytes() const {
  return (qweight_.size() + qzeros_.size()) * sizeof(uint32_t) + scales_.size() * sizeof(float) +
         columns_.size() * sizeof(int32_t);
}

}  // namespace nibble::gpu_ref
