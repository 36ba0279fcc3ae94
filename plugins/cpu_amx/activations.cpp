// Activation preparation: the row layout, staging into slot order, and the portable row kernels
// (activation_rows_avx512.cpp has the vector ones, with the same bits). The int8 quantization here
// is the one definition every W4A8 path uses, so all of them see the same integers: amax in fp32
// (at least 1e-7), sa = amax / 127, inv = 127 / amax, q = round-half-to-even(x · inv), each
// product rounded to fp32 on its own. A row holding a NaN gets sa = NaN (the max alone would skip
// it) and a row holding an infinity gets sa = inf, so the row's outputs are NaN or infinite, as
// they would be in floating point, and the other rows are untouched.
#include "activations.hpp"

#include "activation_rows.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>

namespace nibble::cpu_amx {
namespace {

size_t align64(size_t b) { return (b + 63) / 64 * 64; }

void widen_portable(const void* src, DLDataType dtype, int64_t n, float* out) {
  if (dtype.bits == 32) {
    std::memcpy(out, src, size_t(n) * sizeof(float));
    return;
  }
  const auto* h = static_cast<const uint16_t*>(src);
  for (int64_t k = 0; k < n; ++k)
    out[k] = dtype.code == kDLBfloat ? sdk::bf16_to_f32(h[k]) : sdk::f16_to_f32(h[k]);
}

void to_bf16_portable(const float* in, int64_t n, uint16_t* out) {
  for (int64_t k = 0; k < n; ++k) out[k] = sdk::f32_to_bf16(in[k]);
}

float sum_bf16_portable(const uint16_t* v, int64_t n) {
  float lane[16] = {};
  for (int64_t i = 0; i < n; i += 16)
    for (int l = 0; l < 16; ++l) lane[l] += sdk::bf16_to_f32(v[i + l]);
  for (int h = 8; h >= 1; h /= 2)
    for (int l = 0; l < h; ++l) lane[l] += lane[l + h];
  return lane[0];
}

float quantize_portable(const float* in, int64_t n, int8_t* out) {
  float amax = 0.f;
  bool has_nan = false;
  for (int64_t k = 0; k < n; ++k) {
    amax = std::max(amax, std::fabs(in[k]));
    has_nan |= std::isnan(in[k]);
  }
  amax = std::max(amax, 1e-7f);
  const float sa = amax / 127.f;
  const float inv = 127.f / amax;
  for (int64_t k = 0; k < n; ++k) {
    float r = std::nearbyint(in[k] * inv);  // the default rounding mode: half to even
    r = std::min(127.f, std::max(-127.f, r));
    out[(k & ~int64_t(7)) + a8_position(int(k & 7))] = int8_t(r);
  }
  return has_nan ? std::numeric_limits<float>::quiet_NaN() : sa;
}

FixedChunk to_fixed_portable(const float* in, int64_t n, int8_t* hi, int8_t* lo) {
  float amax = 0.f;
  bool bad = false;
  for (int64_t k = 0; k < n; ++k) {
    amax = std::max(amax, std::fabs(in[k]));
    bad |= !std::isfinite(in[k]);
  }
  if (bad || amax == 0.f) {
    std::memset(hi, 0, size_t(n));
    std::memset(lo, 0, size_t(n));
    return {bad ? std::numeric_limits<float>::quiet_NaN() : 1.f, 0};
  }
  const int shift = fixed_point_shift(amax);
  int32_t sum = 0;
  for (int64_t k = 0; k < n; ++k) {
    const auto v = int32_t(std::nearbyint(std::ldexp(in[k], shift)));  // |v| ≤ 2^14
    const int32_t h = (v + 128) >> 8;                                  // arithmetic shift: floor
    const size_t at = size_t((k & ~int64_t(7)) + a8_position(int(k & 7)));
    hi[at] = int8_t(h);
    lo[at] = int8_t(v - 256 * h);
    sum += v;
  }
  return {fixed_point_step(shift), sum};
}

FixedChunk to_fixed_from_portable(const void* src, DLDataType dtype, int64_t valid, int64_t n,
                                  int8_t* hi, int8_t* lo) {
  if (n > kMaxFixedSlots || valid > n)
    throw std::logic_error("cpu_amx: a fixed-point chunk of more than 128 slots or values");
  float slots[kMaxFixedSlots] = {};
  if (valid > 0) widen_portable(src, dtype, valid, slots);
  return to_fixed_portable(slots, n, hi, lo);
}

int32_t sum_i8_portable(const int8_t* v, int64_t n) {
  int32_t s = 0;
  for (int64_t i = 0; i < n; ++i) s += v[i];
  return s;
}

void stage_slot_range(const sdk::Matrix& x, const PackedLinear& w, const RowKernels& rk, int64_t m,
                      int64_t s0, int64_t s1, float* slots, size_t first_run = 0);

// Row m of x in the weight's slot order as fp32 (`slots`, Kp values, zero in padding slots);
// `row` is K values of scratch, used only where the slots take their channels one by one.
void stage_slots(const sdk::Matrix& x, const PackedLinear& w, const RowKernels& rk, int64_t m,
                 float* row, float* slots) {
  if (w.slot_source.empty()) {
    stage_slot_range(x, w, rk, m, 0, w.Kp, slots);
    return;
  }
  std::memset(slots, 0, size_t(w.Kp) * sizeof(float));
  rk.widen(x.row<char>(m), x.dtype, w.K, row);
  for (const auto& run : w.runs)
    std::memcpy(slots + run.dst, row + run.src, size_t(run.len) * sizeof(float));
  for (size_t j = 0; j < w.slot_source.size(); ++j)
    if (w.slot_source[j] >= 0) slots[j] = row[size_t(w.slot_source[j])];
}

// Slots [s0, s1) of row m, each run's share widened straight into place (no staging row and no
// copy: a call's preparation is on every thread's path). Runs only, not slot_source. The runs
// ascend in their slots, so the walk starts at run `first_run` (none before it reaches s0) and
// stops at the first run past s1.
void stage_slot_range(const sdk::Matrix& x, const PackedLinear& w, const RowKernels& rk, int64_t m,
                      int64_t s0, int64_t s1, float* slots, size_t first_run) {
  std::memset(slots + s0, 0, size_t(s1 - s0) * sizeof(float));
  const char* src = x.row<char>(m);
  const size_t bytes = size_t(x.dtype.bits / 8);
  for (size_t j = first_run; j < w.runs.size() && w.runs[j].dst < s1; ++j) {
    const auto& run = w.runs[j];
    const int64_t lo = std::max<int64_t>(s0, run.dst),
                  hi = std::min<int64_t>(s1, run.dst + run.len);
    if (lo < hi)
      rk.widen(src + size_t(run.src + lo - run.dst) * bytes, x.dtype, hi - lo, slots + lo);
  }
}

// Chunks [c0, c1) of fixed-point row m from row `xrow` of x, with their steps and sums, for a
// weight whose slots take their channels in runs (no per-slot map). Without act-order a chunk's
// slots are a prefix of one run's channels and then padding, so it converts straight from x
// (to_fixed_from: one pass, the staged bits); a chunk whose slots take several runs (act-order
// with long runs) is staged into `slots` (Kp floats) from the runs that reach it.
void fixed_chunks(const sdk::Matrix& x, int64_t xrow, const PackedLinear& w, const RowKernels& rk,
                  const A16FixedActivations& a, int64_t m, int64_t c0, int64_t c1, float* slots) {
  int8_t* hi = const_cast<int8_t*>(a.q) + size_t(2 * m) * size_t(a.stride);
  int8_t* lo = hi + a.stride;
  float* steps = const_cast<float*>(a.step) + size_t(m) * size_t(a.chunks);
  int32_t* sums = const_cast<int32_t*>(a.sum) + size_t(m) * size_t(a.chunks);
  const char* src = x.row<char>(xrow);
  const size_t bytes = size_t(x.dtype.bits / 8);
  const auto& runs = w.runs;
  size_t r = 0;  // the first run that reaches the chunk (both ascend)
  for (int64_t c = c0; c < c1; ++c) {
    const Chunk& ch = w.a8_chunks[size_t(c)];
    const int64_t s0 = int64_t(ch.tile0) * kTileK, n = int64_t(ch.ntiles) * kTileK;
    while (r < runs.size() && runs[r].dst + runs[r].len <= s0) ++r;
    const bool one_run = w.slot_source.empty() && n <= kMaxFixedSlots && r < runs.size() &&
                         runs[r].dst <= s0 && (r + 1 == runs.size() || runs[r + 1].dst >= s0 + n);
    FixedChunk f;
    if (one_run) {
      const int64_t valid = std::min<int64_t>(n, runs[r].dst + runs[r].len - s0);
      f = rk.to_fixed_from(src + size_t(runs[r].src + s0 - runs[r].dst) * bytes, x.dtype, valid, n,
                           hi + s0, lo + s0);
    } else {
      stage_slot_range(x, w, rk, xrow, s0, s0 + n, slots, r);
      f = rk.to_fixed(slots + s0, n, hi + s0, lo + s0);
    }
    steps[c] = f.step;
    sums[c] = f.sum;
  }
}

}  // namespace

RowKernels row_kernels(IsaLevel level) {
  if (level >= IsaLevel::avx512) return row_kernels_avx512();
  return {&widen_portable,    &to_bf16_portable,       &sum_bf16_portable, &quantize_portable,
          &to_fixed_portable, &to_fixed_from_portable, &sum_i8_portable};
}

size_t a16_workspace_bytes(const PackedLinear& w, int64_t M) {
  const size_t rows = size_t(padded_rows(M));
  return align64(rows * size_t(a16_stride(w.Kp)) * 2) +
         align64(size_t(M) * w.a16_chunks.size() * 4);
}

A16Activations a16_view(const PackedLinear& w, int64_t M, void* workspace) {
  char* p = static_cast<char*>(workspace);
  A16Activations a;
  a.x = reinterpret_cast<const uint16_t*>(p);
  a.stride = a16_stride(w.Kp);
  p += align64(size_t(padded_rows(M)) * size_t(a.stride) * 2);
  a.sum = reinterpret_cast<const float*>(p);
  a.chunks = int64_t(w.a16_chunks.size());
  return a;
}

void a16_fill(const sdk::Matrix& x, const PackedLinear& w, const A16Activations& a, int64_t m0,
              int64_t m1, IsaLevel level) {
  const RowKernels rk = row_kernels(level);
  // Per thread and kept: a forward allocates nothing once warm.
  thread_local std::vector<float> row, slots;
  if (row.size() < size_t(w.K)) row.resize(size_t(w.K));
  if (slots.size() < size_t(w.Kp)) slots.resize(size_t(w.Kp));
  auto* xb = const_cast<uint16_t*>(a.x);
  auto* sums = const_cast<float*>(a.sum);
  const int64_t M = x.rows;
  for (int64_t m = m0; m < m1; ++m) {
    uint16_t* out = xb + size_t(m) * size_t(a.stride);
    if (m >= M) {  // padding rows for the tile kernels
      std::memset(out, 0, size_t(a.stride) * 2);
      continue;
    }
    if (x.dtype.code == kDLBfloat) {  // copied as they are: no rounding, NaN bits kept
      std::memset(out, 0, size_t(w.Kp) * 2);
      const uint16_t* s = x.row<uint16_t>(m);
      for (const auto& run : w.runs) std::memcpy(out + run.dst, s + run.src, size_t(run.len) * 2);
      for (size_t j = 0; j < w.slot_source.size(); ++j)
        if (w.slot_source[j] >= 0) out[j] = s[w.slot_source[j]];
    } else {
      stage_slots(x, w, rk, m, row.data(), slots.data());
      rk.to_bf16(slots.data(), w.Kp, out);
    }
    std::memset(out + w.Kp, 0, size_t(a.stride - w.Kp) * 2);
    float* srow = sums + size_t(m) * size_t(a.chunks);
    for (size_t c = 0; c < w.a16_chunks.size(); ++c) {
      const Chunk& ch = w.a16_chunks[c];
      srow[c] = rk.sum_bf16(out + size_t(ch.tile0) * kTileK, int64_t(ch.ntiles) * kTileK);
    }
  }
}

size_t a8_workspace_bytes(const PackedLinear& w, int64_t M) {
  const size_t rows = size_t(padded_rows(M));
  return align64(rows * size_t(a8_stride(w.Kp))) + align64(rows * 4) +
         align64(size_t(M) * w.a8_chunks.size() * 4);
}

A8Activations a8_view(const PackedLinear& w, int64_t M, void* workspace) {
  char* p = static_cast<char*>(workspace);
  const size_t rows = size_t(padded_rows(M));
  A8Activations a;
  a.q = reinterpret_cast<const int8_t*>(p);
  a.stride = a8_stride(w.Kp);
  p += align64(rows * size_t(a.stride));
  a.scale = reinterpret_cast<const float*>(p);
  p += align64(rows * 4);
  a.sum = reinterpret_cast<const int32_t*>(p);
  a.chunks = int64_t(w.a8_chunks.size());
  return a;
}

void a8_fill(const sdk::Matrix& x, const PackedLinear& w, const A8Activations& a, int64_t m0,
             int64_t m1, IsaLevel level) {
  const RowKernels rk = row_kernels(level);
  // Per thread and kept: a forward allocates nothing once warm.
  thread_local std::vector<float> row, slots;
  if (row.size() < size_t(w.K)) row.resize(size_t(w.K));
  if (slots.size() < size_t(w.Kp)) slots.resize(size_t(w.Kp));
  auto* xq = const_cast<int8_t*>(a.q);
  auto* scales = const_cast<float*>(a.scale);
  auto* sums = const_cast<int32_t*>(a.sum);
  const int64_t M = x.rows;
  for (int64_t m = m0; m < m1; ++m) {
    int8_t* out = xq + size_t(m) * size_t(a.stride);
    if (m >= M) {
      std::memset(out, 0, size_t(a.stride));
      scales[m] = 0.f;
      continue;
    }
    // Padding slots are 0 in `slots`: they neither change amax nor quantize to anything but 0.
    stage_slots(x, w, rk, m, row.data(), slots.data());
    scales[m] = rk.quantize(slots.data(), w.Kp, out);
    std::memset(out + w.Kp, 0, size_t(a.stride - w.Kp));
    int32_t* srow = sums + size_t(m) * size_t(a.chunks);
    for (size_t c = 0; c < w.a8_chunks.size(); ++c) {
      const Chunk& ch = w.a8_chunks[c];
      srow[c] = rk.sum_i8(out + size_t(ch.tile0) * kTileK, int64_t(ch.ntiles) * kTileK);
    }
  }
}

size_t a16_fixed_workspace_bytes(const PackedLinear& w, int64_t M) {
  return align64(size_t(2 * M) * size_t(a8_stride(w.Kp))) +
         2 * align64(size_t(M) * w.a8_chunks.size() * 4);
}

A16FixedActivations a16_fixed_view(const PackedLinear& w, int64_t M, void* workspace) {
  char* p = static_cast<char*>(workspace);
  A16FixedActivations a;
  a.q = reinterpret_cast<const int8_t*>(p);
  a.stride = a8_stride(w.Kp);
  p += align64(size_t(2 * M) * size_t(a.stride));
  a.step = reinterpret_cast<const float*>(p);
  p += align64(size_t(M) * w.a8_chunks.size() * 4);
  a.sum = reinterpret_cast<const int32_t*>(p);
  a.chunks = int64_t(w.a8_chunks.size());
  return a;
}

int64_t a16_fixed_fill_pieces(const PackedLinear& w) {
  if (!w.slot_source.empty()) return 1;
  return std::max<int64_t>(1, int64_t(w.a8_chunks.size()) / 2);
}

void a16_fixed_fill(const sdk::Matrix& x, const PackedLinear& w, const A16FixedActivations& a,
                    int64_t m0, int64_t m1, IsaLevel level, int64_t piece, int64_t pieces) {
  if (!w.slot_source.empty()) {
    // A row whose slots take their channels one by one is staged whole: piece 0 fills it.
    if (piece == 0) a16_fixed_fill_rows(x, nullptr, x.rows, w, a, m0, m1, level);
    return;
  }
  const RowKernels rk = row_kernels(level);
  thread_local std::vector<float> slots;  // kept: a warm forward allocates nothing
  if (slots.size() < size_t(w.Kp)) slots.resize(size_t(w.Kp));
  const int64_t chunks = int64_t(w.a8_chunks.size());
  pieces = std::max<int64_t>(pieces, 1);
  const int64_t c0 = chunks * piece / pieces, c1 = chunks * (piece + 1) / pieces;
  for (int64_t m = m0; m < std::min(m1, x.rows); ++m) {
    fixed_chunks(x, m, w, rk, a, m, c0, c1, slots.data());
    if (piece == pieces - 1) {
      int8_t* hi = const_cast<int8_t*>(a.q) + size_t(2 * m) * size_t(a.stride);
      std::memset(hi + w.Kp, 0, size_t(a.stride - w.Kp));
      std::memset(hi + a.stride + w.Kp, 0, size_t(a.stride - w.Kp));
    }
  }
}

void a16_fixed_fill_rows(const sdk::Matrix& x, const int64_t* source, int64_t n,
                         const PackedLinear& w, const A16FixedActivations& a, int64_t m0,
                         int64_t m1, IsaLevel level) {
  const RowKernels rk = row_kernels(level);
  thread_local std::vector<float> row, slots;  // kept: a warm forward allocates nothing
  if (row.size() < size_t(w.K)) row.resize(size_t(w.K));
  if (slots.size() < size_t(w.Kp)) slots.resize(size_t(w.Kp));
  auto* q = const_cast<int8_t*>(a.q);
  auto* steps = const_cast<float*>(a.step);
  auto* sums = const_cast<int32_t*>(a.sum);
  for (int64_t m = m0; m < std::min(m1, n); ++m) {
    const int64_t xrow = source ? source[m] : m;
    int8_t* hi = q + size_t(2 * m) * size_t(a.stride);
    int8_t* lo = hi + a.stride;
    if (w.slot_source.empty()) {
      fixed_chunks(x, xrow, w, rk, a, m, 0, int64_t(w.a8_chunks.size()), slots.data());
    } else {
      stage_slots(x, w, rk, xrow, row.data(), slots.data());
      for (size_t c = 0; c < w.a8_chunks.size(); ++c) {
        const Chunk& ch = w.a8_chunks[c];
        const size_t at = size_t(ch.tile0) * kTileK;
        const FixedChunk f =
            rk.to_fixed(slots.data() + at, int64_t(ch.ntiles) * kTileK, hi + at, lo + at);
        steps[size_t(m) * size_t(a.chunks) + c] = f.step;
        sums[size_t(m) * size_t(a.chunks) + c] = f.sum;
      }
    }
    std::memset(hi + w.Kp, 0, size_t(a.stride - w.Kp));
    std::memset(lo + w.Kp, 0, size_t(a.stride - w.Kp));
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

void a16_fixed_gather(const A16FixedActivations& from, const int64_t* source, int64_t n,
                      const A16FixedActivations& to, int64_t m0, int64_t m1) {
  auto* q = const_cast<int8_t*>(to.q);
  auto* steps = const_cast<float*>(to.step);
  auto* sums = const_cast<int32_t*>(to.sum);
  const size_t chunks = size_t(to.chunks);
  for (int64_t m = m0; m < std::min(m1, n); ++m) {
    const size_t r = size_t(source[m]);
    std::memcpy(q + size_t(2 * m) * size_t(to.stride), from.q + 2 * r * size_t(from.stride),
                2 * size_t(to.stride));
    std::memcpy(steps + size_t(m) * chunks, from.step + r * size_t(from.chunks),
                chunks * sizeof(float));
    std::memcpy(sums + size_t(m) * chunks, from.sum + r * size_t(from.chunks),
                chunks * sizeof(int32_t));
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
