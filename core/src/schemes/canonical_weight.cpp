// CanonicalWeight: the C view, element access and the consistency check.
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

nibble_canonical_weight CanonicalWeight::view() const {
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

int64_t CanonicalWeight::group_of(int64_t k) const {
  if (!g_idx.empty()) return g_idx[size_t(k)];
  return group_size == -1 ? 0 : k / group_size;
}

double CanonicalWeight::scale(int64_t g, int64_t n) const {
  return sdk::load_float(scales.data(), scales_dtype, size_t(g * N + n));
}

double CanonicalWeight::bias_at(int64_t n) const {
  return bias.empty() ? 0.0 : sdk::load_float(bias.data(), bias_dtype, size_t(n));
}

double CanonicalWeight::dequant(int64_t n, int64_t k) const {
  int64_t g = group_of(k);
  return double(int(q[size_t(n * K + k)]) - int(zeros[size_t(g * N + n)])) * scale(g, n);
}

bool CanonicalWeight::symmetric() const {
  const uint8_t half = uint8_t(1u << (bits - 1));
  for (uint8_t z : zeros) {
    if (z != half) return false;
  }
  return true;
}

void CanonicalWeight::validate(const std::string& what) const {
  auto fail = [&](const std::string& msg) { return Error(what + ": " + msg); };
  if (bits != 4 && bits != 8) throw fail(fmt::format("bits {} (expected 4 or 8)", bits));
  if (group_size != -1 && group_size <= 0)
    throw fail(fmt::format("group_size {} (expected > 0 or -1)", group_size));
  if (K <= 0 || N <= 0) throw fail(fmt::format("empty weight K={} N={}", K, N));
  if (num_groups != groups_for(K, group_size)) {
    throw fail(fmt::format("num_groups {} but K={} and group_size {} give {}", num_groups, K,
                           group_size, groups_for(K, group_size)));
  }
  if (q.size() != size_t(N * K))
    throw fail(fmt::format("q holds {} values, expected N*K = {}", q.size(), N * K));
  if (zeros.size() != size_t(num_groups * N)) {
    throw fail(fmt::format("zeros holds {} values, expected num_groups*N = {}", zeros.size(),
                           num_groups * N));
  }
  if (!sdk::is_float_dtype(scales_dtype))
    throw fail("scales dtype " + sdk::dtype_name(scales_dtype) + " (expected f16, bf16 or f32)");
  if (scales.size() != size_t(num_groups * N) * sdk::dtype_bytes(scales_dtype)) {
    throw fail(fmt::format("scales hold {} bytes, expected {}", scales.size(),
                           size_t(num_groups * N) * sdk::dtype_bytes(scales_dtype)));
  }
  if (!bias.empty()) {
    if (!sdk::is_float_dtype(bias_dtype)) throw fail("bias dtype " + sdk::dtype_name(bias_dtype));
    if (bias.size() != size_t(N) * sdk::dtype_bytes(bias_dtype))
      throw fail(fmt::format("bias holds {} bytes for N={}", bias.size(), N));
  }
  const unsigned max_q = (1u << bits) - 1;
  for (size_t i = 0; i < q.size(); ++i) {
    if (q[i] > max_q)
      throw fail(fmt::format("q[{}] = {} exceeds {} for {}-bit", i, q[i], max_q, bits));
  }
  if (!g_idx.empty()) {
    if (g_idx.size() != size_t(K))
      throw fail(fmt::format("g_idx has {} entries, expected K = {}", g_idx.size(), K));
    for (size_t k = 0; k < g_idx.size(); ++k) {
      if (g_idx[k] < 0 || g_idx[k] >= num_groups) {
        throw fail(fmt::format("g_idx[{}] = {} is outside [0, {})", k, g_idx[k], num_groups));
      }
    }
  }
}

}  // namespace nibble
