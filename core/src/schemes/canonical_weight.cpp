// The core's consistency check of a canonical weight, and grouping helpers.
#include <nibble/canonical_weight.hpp>
#include <nibble/error.hpp>
#include <nibble/sdk/numeric.hpp>

#include <fmt/format.h>

namespace nibble {

int64_t groups_for(int64_t K, int group_size) {
  if (group_size == -1) return 1;
  // Found by fuzz_schemes: a group size of 0 used to divide by zero here.
  if (group_size <= 0)
    throw Error(
        fmt::format("group_size {} is invalid (expected a positive size or -1)", group_size));
  return (K + group_size - 1) / group_size;
}

bool is_identity_grouping(const std::vector<int32_t>& g_idx, int group_size) {
  if (group_size <= 0 && group_size != -1) return false;
  for (size_t k = 0; k < g_idx.size(); ++k) {
    int64_t expect = group_size == -1 ? 0 : int64_t(k) / group_size;
    if (g_idx[k] != expect) return false;
  }
  return true;
}

void validate(const CanonicalWeight& w, const std::string& what) {
  auto fail = [&](const std::string& msg) { return Error(what + ": " + msg); };
  if (w.bits != 4 && w.bits != 8) throw fail(fmt::format("bits {} (expected 4 or 8)", w.bits));
  if (w.group_size != -1 && w.group_size <= 0)
    throw fail(fmt::format("group_size {} (expected > 0 or -1)", w.group_size));
  if (w.K <= 0 || w.N <= 0) throw fail(fmt::format("empty weight K={} N={}", w.K, w.N));
  // With a g_idx the groups are whatever rows it points at: a row-parallel shard keeps every
  // group's scales (act-order) though its K spans fewer, and a group no channel uses is allowed.
  if (!w.g_idx.empty() ? w.num_groups < 1 : w.num_groups != groups_for(w.K, w.group_size)) {
    throw fail(w.g_idx.empty()
                   ? fmt::format("num_groups {} but K={} and group_size {} give {}", w.num_groups,
                                 w.K, w.group_size, groups_for(w.K, w.group_size))
                   : fmt::format("num_groups {} (expected at least 1)", w.num_groups));
  }
  if (w.q.size() != size_t(w.N * w.K))
    throw fail(fmt::format("q holds {} values, expected N*K = {}", w.q.size(), w.N * w.K));
  if (w.zeros.size() != size_t(w.num_groups * w.N)) {
    throw fail(fmt::format("zeros holds {} values, expected num_groups*N = {}", w.zeros.size(),
                           w.num_groups * w.N));
  }
  if (!sdk::is_float_dtype(w.scales_dtype))
    throw fail("scales dtype " + sdk::dtype_name(w.scales_dtype) + " (expected f16, bf16 or f32)");
  if (w.scales.size() != size_t(w.num_groups * w.N) * sdk::dtype_bytes(w.scales_dtype)) {
    throw fail(fmt::format("scales hold {} bytes, expected {}", w.scales.size(),
                           size_t(w.num_groups * w.N) * sdk::dtype_bytes(w.scales_dtype)));
  }
  if (!w.bias.empty()) {
    if (!sdk::is_float_dtype(w.bias_dtype))
      throw fail("bias dtype " + sdk::dtype_name(w.bias_dtype));
    if (w.bias.size() != size_t(w.N) * sdk::dtype_bytes(w.bias_dtype))
      throw fail(fmt::format("bias holds {} bytes for N={}", w.bias.size(), w.N));
  }
  const unsigned max_q = (1u << w.bits) - 1;
  for (size_t i = 0; i < w.q.size(); ++i) {
    if (w.q[i] > max_q)
      throw fail(fmt::format("q[{}] = {} exceeds {} for {}-bit", i, w.q[i], max_q, w.bits));
  }
  if (!w.g_idx.empty()) {
    if (w.g_idx.size() != size_t(w.K))
      throw fail(fmt::format("g_idx has {} entries, expected K = {}", w.g_idx.size(), w.K));
    for (size_t k = 0; k < w.g_idx.size(); ++k) {
      if (w.g_idx[k] < 0 || w.g_idx[k] >= w.num_groups) {
        throw fail(fmt::format("g_idx[{}] = {} is outside [0, {})", k, w.g_idx[k], w.num_groups));
      }
    }
  }
}

}  // namespace nibble
