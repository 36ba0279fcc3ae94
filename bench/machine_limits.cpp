#include "machine_limits.hpp"

#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace nibble::bench {

size_t l3_bytes() {
  for (int i = 0; i < 8; ++i) {
    const std::string base = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
    std::ifstream level(base + "level"), size(base + "size");
    int l = 0;
    std::string s;
    if (!(level >> l) || !(size >> s)) continue;
    if (l != 3 || s.empty()) continue;
    size_t v = std::strtoull(s.c_str(), nullptr, 10);
    char unit = s.back();
    if (unit == 'K') v <<= 10;
    if (unit == 'M') v <<= 20;
    return v;
  }
  return size_t(32) << 20;
}

bool amx_usable() {
  static const bool usable = [] {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    const bool tile = (d >> 24) & 1, bf16 = (d >> 22) & 1, int8 = (d >> 25) & 1;
    if (!(tile && bf16 && int8)) return false;
    // ARCH_REQ_XCOMP_PERM for XTILEDATA (feature 18), before the probe threads start.
    return syscall(SYS_arch_prctl, 0x1023, 18) == 0;
  }();
  return usable;
}

ReadBandwidth::ReadBandwidth(size_t bytes, int threads) : threads_(threads) {
  words_ = bytes / 8 / (64 * size_t(threads)) * (64 * size_t(threads));
  data_ = static_cast<uint64_t*>(std::aligned_alloc(64, words_ * 8));
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([this, t] {
      const size_t per = words_ / size_t(threads_);
      for (size_t i = per * size_t(t); i < per * size_t(t + 1); ++i) data_[i] = i;
    });
  for (auto& t : ts) t.join();
}

ReadBandwidth::~ReadBandwidth() { std::free(data_); }

namespace {
// Four streams through one chunk, 8 independent sums each (vectorized by the compiler).
uint64_t read_chunk_portable(const uint64_t* p, size_t words) {
  const size_t q = words / 4 / 8 * 8;
  uint64_t s[4][8] = {};
  for (size_t i = 0; i < q; i += 8)
    for (int st = 0; st < 4; ++st)
      for (int j = 0; j < 8; ++j) s[st][j] += p[size_t(st) * q + i + size_t(j)];
  uint64_t r = 0;
  for (auto& a : s)
    for (uint64_t v : a) r += v;
  return r;
}

// The same with 64-byte loads, two accumulators per stream: what a weight-streaming kernel does.
__attribute__((target("avx512f"))) uint64_t read_chunk_avx512(const uint64_t* p, size_t words) {
  const size_t q = words / 4 / 16 * 16;
  __m512i s[4][2];
  for (auto& a : s) a[0] = a[1] = _mm512_setzero_si512();
  for (size_t i = 0; i < q; i += 16)
    for (int st = 0; st < 4; ++st) {
      const uint64_t* b = p + size_t(st) * q + i;
      s[st][0] = _mm512_add_epi64(s[st][0], _mm512_load_si512(b));
      s[st][1] = _mm512_add_epi64(s[st][1], _mm512_load_si512(b + 8));
    }
  __m512i t = _mm512_setzero_si512();
  for (auto& a : s) t = _mm512_add_epi64(t, _mm512_add_epi64(a[0], a[1]));
  alignas(64) uint64_t lanes[8];
  _mm512_store_si512(lanes, t);
  uint64_t r = 0;
  for (uint64_t v : lanes) r += v;
  return r;
}

uint64_t read_chunk(const uint64_t* p, size_t words) {
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  return avx512 ? read_chunk_avx512(p, words) : read_chunk_portable(p, words);
}
}  // namespace

double ReadBandwidth::sample() const {
  std::vector<std::thread> ts;
  std::vector<uint64_t> sink(static_cast<size_t>(threads_));
  const auto t0 = std::chrono::steady_clock::now();
  for (int t = 0; t < threads_; ++t)
    ts.emplace_back([&, t] {
      const size_t per = words_ / size_t(threads_);
      sink[size_t(t)] = read_chunk(data_ + per * size_t(t), per);
    });
  for (auto& t : ts) t.join();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  volatile uint64_t keep = sink[0];
  (void)keep;
  return double(words_) * 8 / s / 1e9;
}

DeviceCopyBandwidth::DeviceCopyBandwidth(const sdk::host::Device& device, size_t bytes)
    : device_(device), from_(device.alloc(bytes)), to_(device.alloc(bytes)) {
  // Both buffers touched once, so the first sample pays for no lazy allocation.
  device_.copy(to_.get(), from_.get(), bytes, NIBBLE_COPY_DEVICE_TO_DEVICE, nullptr);
  device_.synchronize(nullptr);
}

double DeviceCopyBandwidth::sample() const {
  const auto t0 = std::chrono::steady_clock::now();
  device_.copy(to_.get(), from_.get(), from_.size(), NIBBLE_COPY_DEVICE_TO_DEVICE, nullptr);
  device_.synchronize(nullptr);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return 2.0 * double(from_.size()) / s / 1e9;
}

}  // namespace nibble::bench
