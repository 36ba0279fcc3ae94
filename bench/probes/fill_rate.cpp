// Probe (not part of the product; docs/cpu_amx.md "Threads"): how long one decode row's
// fixed-point preparation (K bf16 values to the high and low bytes of 15-bit fixed point, per
// chunk of 128, as activations.cpp does) takes alone and hot, against the same work done by every
// thread at the start of each call of a decode-like loop whose threads then stream their slice
// of cold weights. Two forms: staged (widened to fp32 in a buffer, then two passes per chunk, the
// product's form) and fused (each chunk widened in registers, one pass over memory).
// Usage: nibble_probe_fill_rate [threads] [calls]
// Standalone on purpose: each probe is one experiment in one file.
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

namespace {

inline uint64_t now_ns() {
  return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now().time_since_epoch())
                      .count());
}

inline __m512 widen16(const uint16_t* p) {
  return _mm512_castsi512_ps(
      _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)p)), 16));
}

const __m128i kOrder = _mm_setr_epi8(0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15);

inline int shift_of(float a) {
  uint32_t b;
  std::memcpy(&b, &a, 4);
  const int e = int((b >> 23) & 0xFF) - 127;
  return 13 - (e < -126 ? -126 : e);
}

inline int32_t convert(const __m512* v, int n16, int shift, int8_t* hi, int8_t* lo) {
  const __m512 sc = _mm512_set1_ps(float(shift));
  __m512i sum = _mm512_setzero_si512();
  for (int i = 0; i < n16; ++i) {
    const __m512i q = _mm512_cvt_roundps_epi32(_mm512_scalef_ps(v[i], sc),
                                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512i h = _mm512_srai_epi32(_mm512_add_epi32(q, _mm512_set1_epi32(128)), 8);
    const __m512i l = _mm512_sub_epi32(q, _mm512_slli_epi32(h, 8));
    _mm_storeu_si128((__m128i*)(hi + 16 * i), _mm_shuffle_epi8(_mm512_cvtepi32_epi8(h), kOrder));
    _mm_storeu_si128((__m128i*)(lo + 16 * i), _mm_shuffle_epi8(_mm512_cvtepi32_epi8(l), kOrder));
    sum = _mm512_add_epi32(sum, q);
  }
  return _mm512_reduce_add_epi32(sum);
}

// The product's form: the row widened into `slots`, then per chunk an amax pass and a convert pass.
void fill_staged(const uint16_t* x, int K, float* slots, int8_t* hi, int8_t* lo, float* steps,
                 int32_t* sums) {
  std::memset(slots, 0, size_t(K) * 4);
  for (int i = 0; i < K; i += 16) _mm512_storeu_ps(slots + i, widen16(x + i));
  for (int c = 0; c < K / 128; ++c) {
    const float* in = slots + 128 * c;
    __m512 amax = _mm512_setzero_ps();
    for (int i = 0; i < 128; i += 16)
      amax = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(in + i)), amax);
    const int s = shift_of(_mm512_reduce_max_ps(amax));
    __m512 v[8];
    for (int i = 0; i < 8; ++i) v[i] = _mm512_loadu_ps(in + 16 * i);
    sums[c] = convert(v, 8, s, hi + 128 * c, lo + 128 * c);
    steps[c] = std::ldexp(1.f, -s);
  }
}

// Fused: each chunk's 128 values widened into registers, its amax and conversion from there.
void fill_fused(const uint16_t* x, int K, float*, int8_t* hi, int8_t* lo, float* steps,
                int32_t* sums) {
  for (int c = 0; c < K / 128; ++c) {
    __m512 v[8];
    __m512 amax = _mm512_setzero_ps();
    for (int i = 0; i < 8; ++i) {
      v[i] = widen16(x + 128 * c + 16 * i);
      amax = _mm512_max_ps(_mm512_abs_ps(v[i]), amax);
    }
    const int s = shift_of(_mm512_reduce_max_ps(amax));
    sums[c] = convert(v, 8, s, hi + 128 * c, lo + 128 * c);
    steps[c] = std::ldexp(1.f, -s);
  }
}

using Fill = void (*)(const uint16_t*, int, float*, int8_t*, int8_t*, float*, int32_t*);

struct Scratch {
  std::vector<float> slots = std::vector<float>(16384);
  std::vector<int8_t> hi = std::vector<int8_t>(16384), lo = std::vector<int8_t>(16384);
  std::vector<float> steps = std::vector<float>(128);
  std::vector<int32_t> sums = std::vector<int32_t>(128);
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

double hot_ns(Fill f, const uint16_t* x, int K) {
  Scratch s;
  std::vector<double> t;
  for (int r = 0; r < 2000; ++r) {
    const uint64_t a = now_ns();
    f(x, K, s.slots.data(), s.hi.data(), s.lo.data(), s.steps.data(), s.sums.data());
    t.push_back(double(now_ns() - a));
  }
  return median(t);
}

// Every thread, per call: wait for the call, prepare the row, then read its slice of a cold
// weight copy (the next of many, so the slices come from memory) with 512-bit loads.
double in_call_ns(Fill f, const uint16_t* x, int K, int threads, int calls, size_t slice_bytes) {
  const size_t copies = std::max<size_t>(2, (size_t(1200) << 20) / (slice_bytes * threads));
  std::vector<uint8_t> weights(copies * slice_bytes * size_t(threads), 1);
  std::atomic<int> call{-1};
  std::atomic<int> done{0};
  std::vector<std::vector<double>> fill_ns{size_t(threads)};
  std::atomic<uint64_t> sink{0};
  auto body = [&](int t) {
    Scratch s;
    for (int c = 0; c < calls; ++c) {
      while (call.load(std::memory_order_acquire) < c) _mm_pause();
      const uint64_t a = now_ns();
      f(x, K, s.slots.data(), s.hi.data(), s.lo.data(), s.steps.data(), s.sums.data());
      fill_ns[size_t(t)].push_back(double(now_ns() - a));
      const uint8_t* w =
          weights.data() + ((size_t(c) % copies) * size_t(threads) + size_t(t)) * slice_bytes;
      __m512i acc = _mm512_setzero_si512();
      for (size_t i = 0; i < slice_bytes; i += 64)
        acc = _mm512_dpbusd_epi32(acc, _mm512_loadu_si512(w + i), _mm512_set1_epi8(1));
      sink += uint64_t(_mm512_reduce_add_epi32(acc));
      done.fetch_add(1, std::memory_order_acq_rel);
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(body, t);
  std::thread caller([&] {
    for (int c = 0; c < calls; ++c) {
      call.store(c, std::memory_order_release);
      while (done.load(std::memory_order_acquire) < (c + 1) * (threads - 1)) _mm_pause();
    }
  });
  caller.join();
  for (auto& p : pool) p.join();
  std::vector<double> all;
  for (int t = 1; t < threads; ++t)
    all.insert(all.end(), fill_ns[size_t(t)].begin() + calls / 10, fill_ns[size_t(t)].end());
  return median(all);
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 16;
  const int calls = argc > 2 ? std::atoi(argv[2]) : 2000;
  std::vector<uint16_t> x(16384);
  uint32_t r = 7;
  for (auto& v : x) {
    r = r * 1664525u + 1013904223u;
    const float f = float(int32_t(r >> 8) - (1 << 23)) / float(1 << 23);
    uint32_t b;
    std::memcpy(&b, &f, 4);
    v = uint16_t(b >> 16);
  }
  std::printf(
      "fill of one decode row (fixed point), medians in us; in-call: %d threads, each "
      "also streaming its slice of a cold weight\n",
      threads);
  std::printf("%6s %-7s %8s %10s %10s\n", "K", "form", "hot", "in-call", "slice KB");
  for (int K : {2048, 4096, 14336 / 128 * 128}) {
    const size_t slice = size_t(K) * size_t(K) / 2 / size_t(threads);
    for (auto [name, f] : {std::pair<const char*, Fill>{"staged", fill_staged},
                           std::pair<const char*, Fill>{"fused", fill_fused}}) {
      const double hot = hot_ns(f, x.data(), K);
      const double in_call = in_call_ns(f, x.data(), K, threads, calls, slice);
      std::printf("%6d %-7s %8.2f %10.2f %10zu\n", K, name, hot / 1000, in_call / 1000,
                  slice >> 10);
    }
  }
  return 0;
}
