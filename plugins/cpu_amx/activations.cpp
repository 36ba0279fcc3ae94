// Activation preparation (portable). The int8 quantization here is the one definition every W4A8
// path uses, so all of them see the same integers: amax in fp32 (at least 1e-7), sa = amax / 127,
// inv = 127 / amax, q = round-half-to-even(x · inv), each product rounded to fp32 on its own.
#include "activations.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace nibble::cpu_amx {
namespace {

size_t align64(size_t b) { return (b + 63) / 64 * 64; }

// Row r of x as fp32 into `out` (K values).
void row_as_float(const sdk::Matrix& x, int64_t r, float* out) {
  const int64_t K = x.cols;
  if (x.dtype.bits == 32) {
    std::memcpy(out, x.row<float>(r), size_t(K) * sizeof(float));
  } else if (x.dtype.code == kDLBfloat) {
    const uint16_t* s = x.row<uint16_t>(r);
    for (int64_t k = 0; k < K; ++k) out[k] = sdk::bf16_to_f32(s[k]);
  } else {
    const uint16_t* s = x.row<uint16_t>(r);
    for (int64_t k = 0; k < K; ++k) out[k] = sdk::f16_to_f32(s[k]);
  }
}

}  // namespace

size_t a16_workspace_bytes(const PackedLinear& w, int64_t M) {
  const size_t rows = size_t(padded_rows(M));
  return align64(rows * size_t(w.Kp) * 2) + align64(size_t(M) * w.a16_chunks.size() * 4);
}

A16Activations a16_view(const PackedLinear& w, int64_t M, void* workspace) {
  char* p = static_cast<char*>(workspace);
  A16Activations a;
  a.x = reinterpret_cast<const uint16_t*>(p);
  a.stride = w.Kp;
  p += align64(size_t(padded_rows(M)) * size_t(w.Kp) * 2);
  a.sum = reinterpret_cast<const float*>(p);
  a.chunks = int64_t(w.a16_chunks.size());
  return a;
}

void a16_fill(const sdk::Matrix& x, const PackedLinear& w, const A16Activations& a, int64_t m0,
              int64_t m1) {
  std::vector<float> row(size_t(w.K));
  auto* xb = const_cast<uint16_t*>(a.x);
  auto* sums = const_cast<float*>(a.sum);
  const int64_t M = x.rows;
  for (int64_t m = m0; m < m1; ++m) {
    uint16_t* out = xb + size_t(m) * size_t(a.stride);
    if (m >= M) {  // padding rows for the tile kernels
      std::memset(out, 0, size_t(a.stride) * 2);
      continue;
    }
    std::memset(out, 0, size_t(w.Kp) * 2);
    if (x.dtype.code == kDLBfloat) {
      const uint16_t* s = x.row<uint16_t>(m);
      for (const auto& run : w.runs) std::memcpy(out + run.dst, s + run.src, size_t(run.len) * 2);
      for (size_t j = 0; j < w.slot_source.size(); ++j)
        if (w.slot_source[j] >= 0) out[j] = s[w.slot_source[j]];
    } else {
      row_as_float(x, m, row.data());
      for (const auto& run : w.runs)
        for (int32_t i = 0; i < run.len; ++i)
          out[run.dst + i] = sdk::f32_to_bf16(row[size_t(run.src + i)]);
      for (size_t j = 0; j < w.slot_source.size(); ++j)
        if (w.slot_source[j] >= 0) out[j] = sdk::f32_to_bf16(row[size_t(w.slot_source[j])]);
    }
    float* srow = sums + size_t(m) * size_t(a.chunks);
    for (size_t c = 0; c < w.a16_chunks.size(); ++c) {
      const Chunk& ch = w.a16_chunks[c];
      float s = 0.f;
      const uint16_t* v = out + size_t(ch.tile0) * kTileK;
      for (int64_t i = 0; i < int64_t(ch.ntiles) * kTileK; ++i) s += sdk::bf16_to_f32(v[i]);
      srow[c] = s;
    }
  }
}

size_t a8_workspace_bytes(const PackedLinear& w, int64_t M) {
  const size_t rows = size_t(padded_rows(M));
  return align64(rows * size_t(w.Kp + 64)) + align64(rows * 4) +
         align64(size_t(M) * w.a8_chunks.size() * 4);
}

A8Activations a8_view(const PackedLinear& w, int64_t M, void* workspace) {
  char* p = static_cast<char*>(workspace);
  const size_t rows = size_t(padded_rows(M));
  A8Activations a;
  a.q = reinterpret_cast<const int8_t*>(p);
  a.stride = w.Kp + 64;
  p += align64(rows * size_t(a.stride));
  a.scale = reinterpret_cast<const float*>(p);
  p += align64(rows * 4);
  a.sum = reinterpret_cast<const int32_t*>(p);
  a.chunks = int64_t(w.a8_chunks.size());
  return a;
}

void a8_fill(const sdk::Matrix& x, const PackedLinear& w, const A8Activations& a, int64_t m0,
             int64_t m1) {
  std::vector<float> row(size_t(w.K));
  auto* xq = const_cast<int8_t*>(a.q);
  auto* scales = const_cast<float*>(a.scale);
  auto* sums = const_cast<int32_t*>(a.sum);
  const int64_t M = x.rows;
  for (int64_t m = m0; m < m1; ++m) {
    int8_t* out = xq + size_t(m) * size_t(a.stride);
    std::memset(out, 0, size_t(a.stride));
    if (m >= M) {
      scales[m] = 0.f;
      continue;
    }
    row_as_float(x, m, row.data());
    float amax = 0.f;
    for (int64_t k = 0; k < w.K; ++k) amax = std::max(amax, std::fabs(row[size_t(k)]));
    amax = std::max(amax, 1e-7f);
    const float sa = amax / 127.f;
    const float inv = 127.f / amax;
    scales[m] = sa;
    auto put = [&](int32_t slot, int32_t src) {
      const float v = row[size_t(src)] * inv;
      float r = std::nearbyint(v);  // the default rounding mode: half to even
      r = std::min(127.f, std::max(-127.f, r));
      out[(slot & ~7) + a8_position(slot & 7)] = int8_t(r);
    };
    for (const auto& run : w.runs)
      for (int32_t i = 0; i < run.len; ++i) put(run.dst + i, run.src + i);
    for (size_t j = 0; j < w.slot_source.size(); ++j)
      if (w.slot_source[j] >= 0) put(int32_t(j), w.slot_source[j]);
    int32_t* srow = sums + size_t(m) * size_t(a.chunks);
    for (size_t c = 0; c < w.a8_chunks.size(); ++c) {
      const Chunk& ch = w.a8_chunks[c];
      int32_t s = 0;
      const int8_t* v = out + size_t(ch.tile0) * kTileK;
      for (int64_t i = 0; i < int64_t(ch.ntiles) * kTileK; ++i) s += v[i];
      srow[c] = s;
    }
  }
}

void a16_gather(const A16Activations& from, const int64_t* source, int64_t n,
                const A16Activations& to, int64_t m0, int64_t m1) {
  auto* xb = const_cast<uint16_t*>(to.x);
  auto* sums = const_cast<float*>(to.sum);
  for (int64_t m = m0; m < m1; ++m) {
    uint16_t* out = xb + size_t(m) * size_t(to.stride);
    if (m >= n) {
      std::memset(out, 0, size_t(to.stride) * 2);
      continue;
    }
    const int64_t r = source[m];
    std::memcpy(out, from.x + size_t(r) * size_t(from.stride), size_t(to.stride) * 2);
    std::memcpy(sums + size_t(m) * size_t(to.chunks), from.sum + size_t(r) * size_t(from.chunks),
                size_t(to.chunks) * sizeof(float));
  }
}

void a8_gather(const A8Activations& from, const int64_t* source, int64_t n, const A8Activations& to,
               int64_t m0, int64_t m1) {
  auto* xq = const_cast<int8_t*>(to.q);
  auto* scales = const_cast<float*>(to.scale);
  auto* sums = const_cast<int32_t*>(to.sum);
  for (int64_t m = m0; m < m1; ++m) {
    int8_t* out = xq + size_t(m) * size_t(to.stride);
    if (m >= n) {
      std::memset(out, 0, size_t(to.stride));
      scales[m] = 0.f;
      continue;
    }
    const int64_t r = source[m];
    std::memcpy(out, from.q + size_t(r) * size_t(from.stride), size_t(to.stride));
    scales[m] = from.scale[r];
    std::memcpy(sums + size_t(m) * size_t(to.chunks), from.sum + size_t(r) * size_t(from.chunks),
                size_t(to.chunks) * sizeof(int32_t));
  }
}

bool same_activation_layout(const PackedLinear& a, const PackedLinear& b) {
  auto same_runs = [](const std::vector<PackedLinear::Run>& x,
                      const std::vector<PackedLinear::Run>& y) {
    return std::equal(x.begin(), x.end(), y.begin(), y.end(), [](const auto& u, const auto& v) {
      return u.dst == v.dst && u.src == v.src && u.len == v.len;
    });
  };
  auto same_chunks = [](const std::vector<Chunk>& x, const std::vector<Chunk>& y) {
    return std::equal(x.begin(), x.end(), y.begin(), y.end(), [](const Chunk& u, const Chunk& v) {
      return u.tile0 == v.tile0 && u.ntiles == v.ntiles;
    });
  };
  return a.K == b.K && a.Kp == b.Kp && same_runs(a.runs, b.runs) &&
         a.slot_source == b.slot_source && same_chunks(a.a16_chunks, b.a16_chunks) &&
         same_chunks(a.a8_chunks, b.a8_chunks);
}

}  // namespace nibble::cpu_amx
