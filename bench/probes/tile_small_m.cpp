// Probe (not part of the product; docs/cpu_amx.md "Ceilings on the AMX host"): what limits the
// tile loop of one 16-row block (M <= 16: W4A16 9-16 rows on bf16 tiles, W4A16 2-8 rows and W4A8
// on int8 tiles), where every group of 128 channels ends in C tile stores for its epilogue.
// Operands come from L1-sized buffers, so only the loop's structure is timed:
//   cur      as kernels_amx.cpp: per k-step load A4, B6, B7; C0 += A4·B6, C1 += A4·B7; per group
//            store C0, C1 and zero them;
//   alt      odd k-steps load into A5, B2, B3 instead (no tile is reloaded while the products of
//            the step just issued may still read it);
//   quad     two pairs at once: C0..C3, A4, B5..B7 with B5 loaded again for the fourth product;
//   nostore  cur with one store per 32 groups (what the per-group stores cost);
//   regs     cur's products with no loads and no stores (the register-only rate of two chains);
//   rowsA    cur, quad with A from the kernel's activation rows (16 rows of K = 4096, in L2);
//   pairs    rowsA with the pairs inside the groups (a group's A tiles serve every pair).
// Each round runs every variant once; reported as products per ns per thread and against "cur"
// in the same round. Timing only: the data are arbitrary.
// Usage: nibble_probe_tile_small_m [threads] [rounds]
// Standalone on purpose: each probe is one experiment in one file, so it repeats what it needs
// of the kernels and of the other probes rather than sharing code with them (but for the
// tile configuration, full_tiles.hpp).
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "full_tiles.hpp"

constexpr int kGroups = 32;  // K = 4096 in groups of 128
constexpr int kPairs = 4;    // panel pairs per pass
constexpr int kBTile = 1024;

// Per thread: A rows of one group (16 rows, stride 320 bytes: 256 + a line, as the kernel pads),
// B tiles of one group for four panels, C staging of two steps.
struct Buffers {
  alignas(64) uint8_t a[16 * 320];
  alignas(64) uint8_t a_rows[16 * (8192 + 64)];  // the kernel's activation rows (L2)
  alignas(64) uint8_t b[4][4][kBTile];           // [k-step][panel][tile]
  alignas(64) uint8_t c[2][4][kBTile];
};

#define DP(C, A, B)            \
  do {                         \
    if constexpr (Bf16)        \
      _tile_dpbf16ps(C, A, B); \
    else                       \
      _tile_dpbssd(C, A, B);   \
  } while (0)

// One pass over kGroups groups of kPairs pairs; returns the number of tile products issued.
template <bool Bf16, bool RowsA = false>
static long cur(Buffers& m, bool store_every_group) {
  constexpr int S = Bf16 ? 4 : 2;  // k-steps per group
  long n = 0;
  for (int p = 0; p < kPairs; ++p)
    for (int g = 0; g < kGroups; ++g) {
      if (store_every_group || g == 0) {
        _tile_zero(0);
        _tile_zero(1);
      }
      for (int s = 0; s < S; ++s) {
        if constexpr (RowsA)
          _tile_loadd(4, m.a_rows + (g * S + s) * 64, 8192 + 64);
        else
          _tile_loadd(4, m.a + s * 64, 320);
        _tile_loadd(6, m.b[s][0], 64);
        DP(0, 4, 6);
        _tile_loadd(7, m.b[s][1], 64);
        DP(1, 4, 7);
        n += 2;
      }
      if (store_every_group || g == kGroups - 1) {
        _tile_stored(0, m.c[g & 1][0], 64);
        _tile_stored(1, m.c[g & 1][1], 64);
      }
    }
  return n;
}

template <bool Bf16>
static long alt(Buffers& m) {
  constexpr int S = Bf16 ? 4 : 2;
  long n = 0;
  for (int p = 0; p < kPairs; ++p)
    for (int g = 0; g < kGroups; ++g) {
      _tile_zero(0);
      _tile_zero(1);
      for (int s = 0; s < S; s += 2) {
        _tile_loadd(4, m.a + s * 64, 320);
        _tile_loadd(6, m.b[s][0], 64);
        DP(0, 4, 6);
        _tile_loadd(7, m.b[s][1], 64);
        DP(1, 4, 7);
        _tile_loadd(5, m.a + (s + 1) * 64, 320);
        _tile_loadd(2, m.b[s + 1][0], 64);
        DP(0, 5, 2);
        _tile_loadd(3, m.b[s + 1][1], 64);
        DP(1, 5, 3);
        n += 4;
      }
      _tile_stored(0, m.c[g & 1][0], 64);
      _tile_stored(1, m.c[g & 1][1], 64);
    }
  return n;
}

template <bool Bf16, bool RowsA = false>
static long quad(Buffers& m) {
  constexpr int S = Bf16 ? 4 : 2;
  long n = 0;
  for (int p = 0; p < kPairs; p += 2)
    for (int g = 0; g < kGroups; ++g) {
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
      for (int s = 0; s < S; ++s) {
        if constexpr (RowsA)
          _tile_loadd(4, m.a_rows + (g * S + s) * 64, 8192 + 64);
        else
          _tile_loadd(4, m.a + s * 64, 320);
        _tile_loadd(5, m.b[s][0], 64);
        DP(0, 4, 5);
        _tile_loadd(6, m.b[s][1], 64);
        DP(1, 4, 6);
        _tile_loadd(7, m.b[s][2], 64);
        DP(2, 4, 7);
        _tile_loadd(5, m.b[s][3], 64);
        DP(3, 4, 5);
        n += 4;
      }
      _tile_stored(0, m.c[g & 1][0], 64);
      _tile_stored(1, m.c[g & 1][1], 64);
      _tile_stored(2, m.c[g & 1][2], 64);
      _tile_stored(3, m.c[g & 1][3], 64);
    }
  return n;
}

template <bool Bf16>
static long regs(Buffers& m) {
  constexpr int S = Bf16 ? 4 : 2;
  long n = 0;
  _tile_loadd(4, m.a, 320);
  _tile_loadd(6, m.b[0][0], 64);
  _tile_loadd(7, m.b[0][1], 64);
  _tile_zero(0);
  _tile_zero(1);
  for (int p = 0; p < kPairs; ++p)
    for (int g = 0; g < kGroups; ++g)
      for (int s = 0; s < S; ++s) {
        DP(0, 4, 6);
        DP(1, 4, 7);
        n += 2;
      }
  _tile_stored(0, m.c[0][0], 64);
  return n;
}

using Variant = long (*)(Buffers&);
template <bool Bf16>
static long cur_every(Buffers& m) {
  return cur<Bf16>(m, true);
}
template <bool Bf16>
static long cur_once(Buffers& m) {
  return cur<Bf16>(m, false);
}
template <bool Bf16>
static long cur_rows(Buffers& m) {
  return cur<Bf16, true>(m, true);
}
// The pairs inside the groups: one group's A tiles serve every pair before the next group's.
template <bool Bf16>
static long pairs_inner(Buffers& m) {
  constexpr int S = Bf16 ? 4 : 2;
  long n = 0;
  for (int g = 0; g < kGroups; ++g)
    for (int p = 0; p < kPairs; ++p) {
      _tile_zero(0);
      _tile_zero(1);
      for (int s = 0; s < S; ++s) {
        _tile_loadd(4, m.a_rows + (g * S + s) * 64, 8192 + 64);
        _tile_loadd(6, m.b[s][0], 64);
        DP(0, 4, 6);
        _tile_loadd(7, m.b[s][1], 64);
        DP(1, 4, 7);
        n += 2;
      }
      _tile_stored(0, m.c[p & 1][0], 64);
      _tile_stored(1, m.c[p & 1][1], 64);
    }
  return n;
}

// Products per ns per thread of `passes` passes on every thread at once.
static double run(Variant v, int threads, int passes) {
  std::vector<std::thread> ts;
  std::atomic<int> ready{0};
  std::vector<long> done(threads);
  std::vector<double> secs(threads);
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([&, t] {
      syscall(SYS_arch_prctl, 0x1023, 18);
      Buffers* m = static_cast<Buffers*>(std::aligned_alloc(64, sizeof(Buffers)));
      std::memset(m, 0x11, sizeof(Buffers));
      configure_full_tiles();
      v(*m);  // warm L1 and the tile unit
      ready++;
      while (ready < threads) {
      }
      auto t0 = std::chrono::steady_clock::now();
      long n = 0;
      for (int i = 0; i < passes; ++i) n += v(*m);
      secs[t] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      done[t] = n;
      _tile_release();
      std::free(m);
    });
  for (auto& t : ts) t.join();
  double rate = 0;
  for (int t = 0; t < threads; ++t) rate += double(done[t]) / (secs[t] * 1e9);
  return rate / threads;
}

int main(int argc, char** argv) {
  syscall(SYS_arch_prctl, 0x1023, 18);
  const int threads = argc > 1 ? std::atoi(argv[1]) : 1;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 9;
  struct V {
    const char* name;
    Variant fn;
  };
  const V vs[] = {{"bf16 cur", cur_every<true>},
                  {"bf16 alt", alt<true>},
                  {"bf16 quad", quad<true>},
                  {"bf16 nostore", cur_once<true>},
                  {"bf16 regs", regs<true>},
                  {"bf16 rowsA", cur_rows<true>},
                  {"bf16 rowsA quad", quad<true, true>},
                  {"bf16 rowsA pairs", pairs_inner<true>},
                  {"int8 cur", cur_every<false>},
                  {"int8 alt", alt<false>},
                  {"int8 quad", quad<false>},
                  {"int8 nostore", cur_once<false>},
                  {"int8 regs", regs<false>},
                  {"int8 rowsA", cur_rows<false>},
                  {"int8 rowsA quad", quad<false, true>},
                  {"int8 rowsA pairs", pairs_inner<false>}};
  constexpr int n = sizeof(vs) / sizeof(vs[0]);
  std::vector<std::vector<double>> r(n), rel(n);
  for (int k = 0; k < rounds; ++k) {
    double got[n];
    for (int i = 0; i < n; ++i) got[i] = run(vs[i].fn, threads, 1000);
    for (int i = 0; i < n; ++i) {
      r[i].push_back(got[i]);
      rel[i].push_back(got[i] / got[i < n / 2 ? 0 : n / 2]);
    }
  }
  std::printf("threads %d, rounds %d: tile products per ns per thread (median), against cur\n",
              threads, rounds);
  for (int i = 0; i < n; ++i) {
    auto a = r[i], b = rel[i];
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    std::printf("%-14s %.4f /ns (%.1f ns each)  vs cur %.2f [%.2f..%.2f]\n", vs[i].name,
                a[a.size() / 2], 1.0 / a[a.size() / 2], b[b.size() / 2], b[b.size() / 4],
                b[b.size() * 3 / 4]);
  }
}
