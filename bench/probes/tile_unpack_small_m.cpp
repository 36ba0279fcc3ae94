// Probe (not part of the product; docs/cpu_amx.md "Ceilings on the AMX host"): the bf16 tile loop
// of one 16-row block (W4A16 at 9-16 rows) with the unpacking of the next chunk's B tiles between
// its products, as kernels_amx.cpp runs it, by where A comes from, the order of the pairs and the
// tiles used. Per thread P panel pairs of K = 4096 (128 k-tiles, chunks of 4); A is 16 bf16 rows
// of the kernel's stride (K·2 + 64 bytes, so in L2); per (chunk, pair) the C tiles are zeroed and
// stored, and the next one's B tiles are unpacked from packed 4-bit weights into the other half
// of a 2 × 16 KiB buffer, 4 KiB ahead prefetched into L1.
//   cur       the kernel's order: pair by pair, every chunk of a pair; A4, B6, B7 per k-tile;
//   aL1       cur with every chunk reading the first chunk's A (A stays in L1);
//   grpG      pairs take turns chunk by chunk in groups of G (one chunk's A serves G pairs);
//   alt       odd k-tiles in A5, B2, B3;
//   np4       four panels per step: C0-C3, A4, B5-B7 with B5 loaded again for the fourth;
//   +unpack   the same with the unpacking (without it, the B tiles are static);
// Weights hot (each thread's P pairs stay in L2 and L3). With `cold`, the cur loop instead walks a
// region of a per-thread area of 1 GiB in all (more than the L3) per repetition, with the
// unpacking's prefetch at other distances and into L1 (T0) or L2 (T1).
// Reported per variant: ns per tile product per thread, the mean and the slowest thread.
// Usage: nibble_probe_tile_unpack_small_m [pairs] [threads,threads,...] [rounds] [cold]
// Standalone on purpose: each probe is one experiment in one file, so it repeats what it needs
// of the kernels and of the other probes rather than sharing code with them (but for the
// tile configuration, full_tiles.hpp, and the thread-count argument, thread_counts.hpp).
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
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "full_tiles.hpp"
#include "thread_counts.hpp"

constexpr int kK = 4096, kKTiles = kK / 32, kChunkTiles = 4, kChunks = kKTiles / kChunkTiles;
constexpr int64_t kAStride = kK * 2 + 64;
constexpr size_t kTileBytes = 256;  // one 4-bit (panel, k-tile): 16 columns × 32 inputs
constexpr size_t kBTile = 1024;     // its bf16 B tile
constexpr size_t kPanelBytes = size_t(kKTiles) * kTileBytes;

static uint8_t* align64(std::vector<uint8_t>& v, size_t bytes) {
  v.resize(bytes + 64);
  return reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(v.data()) + 63) & ~uintptr_t(63));
}

// bf16 (128 + q) of the four nibbles of every 16-bit word, as the kernel's unpack_bf16_tile.
static inline void unpack_tile(const uint8_t* src, uint8_t* dst) {
  const __m512i low = _mm512_set1_epi16(0x000F), bias = _mm512_set1_epi16(0x4300);
  for (int u = 0; u < 4; ++u) {
    const __m512i w = _mm512_loadu_si512(src + u * 64);
    _mm512_store_si512(dst + (4 * u + 0) * 64, _mm512_ternarylogic_epi32(w, low, bias, 0xEA));
    _mm512_store_si512(dst + (4 * u + 1) * 64,
                       _mm512_ternarylogic_epi32(_mm512_srli_epi16(w, 4), low, bias, 0xEA));
    _mm512_store_si512(dst + (4 * u + 2) * 64,
                       _mm512_ternarylogic_epi32(_mm512_srli_epi16(w, 8), low, bias, 0xEA));
    _mm512_store_si512(dst + (4 * u + 3) * 64,
                       _mm512_ternarylogic_epi32(_mm512_srli_epi16(w, 12), low, bias, 0xEA));
  }
}

struct ThreadData {
  std::vector<uint8_t> amem, wmem, bmem, cold_mem;
  uint8_t *a = nullptr, *w = nullptr, *b = nullptr, *cold = nullptr;
  size_t region = 0, regions = 0;  // cold: bytes of one repetition's weights, and how many
  alignas(64) float cbuf[2][16 * 64];
  int pairs = 0;

  void init(int P, uint32_t seed, bool with_cold, int threads) {
    pairs = P;
    std::mt19937 rng(seed);
    a = align64(amem, 16 * kAStride);
    std::normal_distribution<float> nd(0.f, 1.f);
    for (int r = 0; r < 16; ++r)
      for (int k = 0; k < kK; ++k) {
        const float f = nd(rng);
        uint32_t u;
        std::memcpy(&u, &f, 4);
        const uint16_t h = uint16_t(u >> 16);
        std::memcpy(a + r * kAStride + k * 2, &h, 2);
      }
    w = align64(wmem, size_t(2 * P) * kPanelBytes + 8192);
    for (size_t i = 0; i < size_t(2 * P) * kPanelBytes; ++i) w[i] = uint8_t(rng());
    b = align64(bmem, 2 * 16 * kBTile);
    for (size_t i = 0; i < 2 * 16 * kBTile; i += 2) {
      const uint16_t h = uint16_t(0x4300 | (rng() & 15));
      std::memcpy(b + i, &h, 2);
    }
    if (with_cold) {
      region = size_t(2 * P) * kPanelBytes;
      regions = std::max<size_t>(4, (size_t(1) << 30) / size_t(threads) / region);
      cold = align64(cold_mem, region * regions + 8192);
      for (size_t i = 0; i < region * regions; i += 64) cold[i] = uint8_t(i >> 6);
    }
  }
  const uint8_t* tile(const uint8_t* base, int panel, int kt) const {
    return base + size_t(panel) * kPanelBytes + size_t(kt) * kTileBytes;
  }
};

// One k-tile of two panels: A (16 rows at the kernel's stride) into tile TA, the panels' B tiles
// (1 KiB apart from B) into TB0 and TB1, C0 += A·B0, C1 += A·B1. A macro: tile numbers must be
// literals.
#define TWO_PANEL_STEP(A, B, TA, TB0, TB1) \
  do {                                     \
    _tile_loadd(TA, A, kAStride);          \
    _tile_loadd(TB0, B, 64);               \
    _tile_dpbf16ps(0, TA, TB0);            \
    _tile_loadd(TB1, (B) + kBTile, 64);    \
    _tile_dpbf16ps(1, TA, TB1);            \
  } while (0)

// Tiles: 0 = A4, B6, B7; 1 = odd k-tiles in A5, B2, B3; 2 = four panels (np4).
// G: pairs taking turns per chunk (1 = the kernel's pair-by-pair order).
template <int Tiles, bool Unpack, bool AFromL1, int G>
static double hot_walk(ThreadData& t, int reps) {
  configure_full_tiles();
  constexpr int NP = Tiles == 2 ? 4 : 2;
  const int groups_of_panels = t.pairs * 2 / NP;
  struct Unit {
    int chunk, panel;
  };
  std::vector<Unit> seq;  // G = 1: every chunk of a pair, then the next pair
  for (int g0 = 0; g0 < groups_of_panels; g0 += G)
    for (int c = 0; c < kChunks; ++c)
      for (int p = g0; p < std::min(groups_of_panels, g0 + G); ++p) seq.push_back({c, p * NP});
  float sink = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int rep = 0; rep < reps; ++rep)
    for (size_t u = 0; u < seq.size(); ++u) {
      const Unit cur = seq[u], next = seq[(u + 1) % seq.size()];
      const uint8_t* bs = t.b + (u & 1) * 16 * kBTile;
      uint8_t* bn = t.b + ((u + 1) & 1) * 16 * kBTile;
      _tile_zero(0);
      _tile_zero(1);
      if constexpr (NP == 4) {
        _tile_zero(2);
        _tile_zero(3);
      }
      for (int i = 0; i < kChunkTiles; ++i) {
        const int kt = cur.chunk * kChunkTiles + i;
        const uint8_t* a = t.a + (AFromL1 ? i : kt) * 64;
        const uint8_t* bb = bs + size_t(i * NP) * kBTile;
        if constexpr (Tiles == 0) {
          TWO_PANEL_STEP(a, bb, 4, 6, 7);
        } else if constexpr (Tiles == 1) {
          if (i & 1)
            TWO_PANEL_STEP(a, bb, 5, 2, 3);
          else
            TWO_PANEL_STEP(a, bb, 4, 6, 7);
        } else {
          _tile_loadd(4, a, kAStride);
          _tile_loadd(5, bb, 64);
          _tile_dpbf16ps(0, 4, 5);
          _tile_loadd(6, bb + kBTile, 64);
          _tile_dpbf16ps(1, 4, 6);
          _tile_loadd(7, bb + 2 * kBTile, 64);
          _tile_dpbf16ps(2, 4, 7);
          _tile_loadd(5, bb + 3 * kBTile, 64);
          _tile_dpbf16ps(3, 4, 5);
        }
        if constexpr (Unpack) {
          const int nkt = next.chunk * kChunkTiles + i;
          for (int j = 0; j < NP; ++j) {
            const uint8_t* src = t.tile(t.w, next.panel + j, nkt);
            _mm_prefetch(reinterpret_cast<const char*>(src) + 4096, _MM_HINT_T0);
            unpack_tile(src, bn + size_t(i * NP + j) * kBTile);
          }
        }
      }
      float* c = t.cbuf[u & 1];
      _tile_stored(0, c, NP * 64);
      _tile_stored(1, c + 16, NP * 64);
      if constexpr (NP == 4) {
        _tile_stored(2, c + 32, NP * 64);
        _tile_stored(3, c + 48, NP * 64);
      }
      sink += c[5];
    }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  _tile_release();
  if (sink == 12345.f) std::puts("");
  return s / (double(reps) * t.pairs * 2 * kKTiles) * 1e9;
}

// The kernel's loop (A4, B6, B7, pair by pair) on cold weights: repetition r walks region
// rep0 + r of the thread's area, prefetching D0 bytes ahead into L1 and D1 into L2 (0: none).
template <int D0, int D1>
static double cold_walk(ThreadData& t, int reps, int rep0) {
  configure_full_tiles();
  float sink = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int rep = 0; rep < reps; ++rep) {
    const uint8_t* w = t.cold + size_t((rep0 + rep) % int(t.regions)) * t.region;
    size_t u = 0;
    for (int p = 0; p < t.pairs; ++p)
      for (int c = 0; c < kChunks; ++c, ++u) {
        const uint8_t* bs = t.b + (u & 1) * 16 * kBTile;
        uint8_t* bn = t.b + ((u + 1) & 1) * 16 * kBTile;
        const int next_pair = c + 1 == kChunks ? p + 1 : p;
        const int next_chunk = c + 1 == kChunks ? 0 : c + 1;
        _tile_zero(0);
        _tile_zero(1);
        for (int i = 0; i < kChunkTiles; ++i) {
          const int kt = c * kChunkTiles + i;
          const uint8_t* bb = bs + size_t(i * 2) * kBTile;
          TWO_PANEL_STEP(t.a + kt * 64, bb, 4, 6, 7);
          if (next_pair < t.pairs)
            for (int j = 0; j < 2; ++j) {
              const uint8_t* src = t.tile(w, 2 * next_pair + j, next_chunk * kChunkTiles + i);
              for (size_t l = 0; l < kTileBytes; l += 64) {
                if (D0) _mm_prefetch(reinterpret_cast<const char*>(src) + D0 + l, _MM_HINT_T0);
                if (D1) _mm_prefetch(reinterpret_cast<const char*>(src) + D1 + l, _MM_HINT_T1);
              }
              unpack_tile(src, bn + size_t(i * 2 + j) * kBTile);
            }
        }
        float* cc = t.cbuf[u & 1];
        _tile_stored(0, cc, 128);
        _tile_stored(1, cc + 16, 128);
        sink += cc[5];
      }
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  _tile_release();
  if (sink == 12345.f) std::puts("");
  return s / (double(reps) * t.pairs * 2 * kKTiles) * 1e9;
}

// Runs fn(thread's data) on every thread at once; prints the mean and slowest ns per product.
template <class Fn>
static void measure(const char* what, int round, std::vector<ThreadData>& th, Fn fn) {
  const int T = int(th.size());
  std::vector<double> ns(size_t(T), 0.0);
  std::atomic<int> ready{0};
  std::vector<std::thread> ts;
  for (int i = 0; i < T; ++i)
    ts.emplace_back([&, i] {
      syscall(SYS_arch_prctl, 0x1023, 18);  // ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA
      ready.fetch_add(1);
      while (ready.load() < T) {
      }
      ns[size_t(i)] = fn(th[size_t(i)]);
    });
  for (auto& x : ts) x.join();
  double sum = 0, most = 0;
  for (double x : ns) sum += x, most = std::max(most, x);
  std::printf("T=%2d round %d %-18s ns/product mean %6.2f slowest %6.2f\n", T, round, what, sum / T,
              most);
  std::fflush(stdout);
}

int main(int argc, char** argv) {
  syscall(SYS_arch_prctl, 0x1023, 18);
  const int P = argc > 1 ? std::max(2, std::atoi(argv[1]) / 2 * 2) : 8;
  const std::vector<int> counts = thread_counts(argc > 2 ? argv[2] : nullptr);
  const int rounds = argc > 3 ? std::max(1, std::atoi(argv[3])) : 3;
  const bool cold = argc > 4 && std::string(argv[4]) == "cold";
  using Hot = double (*)(ThreadData&, int);
  using Cold = double (*)(ThreadData&, int, int);
  const std::pair<const char*, Hot> hot[] = {
      {"cur", hot_walk<0, false, false, 1>},
      {"cur+unpack", hot_walk<0, true, false, 1>},
      {"aL1", hot_walk<0, false, true, 1>},
      {"aL1+unpack", hot_walk<0, true, true, 1>},
      {"grp4", hot_walk<0, false, false, 4>},
      {"grp4+unpack", hot_walk<0, true, false, 4>},
      {"grpAll+unpack", hot_walk<0, true, false, 1 << 20>},
      {"alt", hot_walk<1, false, false, 1>},
      {"alt+unpack", hot_walk<1, true, false, 1>},
      {"np4", hot_walk<2, false, false, 1>},
      {"np4+unpack", hot_walk<2, true, false, 1>},
      {"np4grp2+unpack", hot_walk<2, true, false, 2>},
  };
  const std::pair<const char*, Cold> colds[] = {
      {"cold pf-none", cold_walk<0, 0>},
      {"cold T0-4k", cold_walk<4096, 0>},
      {"cold T0-8k", cold_walk<8192, 0>},
      {"cold T0-2k", cold_walk<2048, 0>},
      {"cold T0-4k+T1-16k", cold_walk<4096, 16384>},
      {"cold T1-8k", cold_walk<0, 8192>},
      {"cold T0-4k+T1-32k", cold_walk<4096, 32768>},
  };
  std::printf("pairs per thread %d, K = %d, %s weights\n", P, kK, cold ? "cold" : "hot");
  for (int T : counts) {
    std::vector<ThreadData> th(static_cast<size_t>(T));
    for (int i = 0; i < T; ++i) th[size_t(i)].init(P, uint32_t(i + 1), cold, T);
    int rep0 = 0;
    for (int r = 0; r < rounds; ++r) {
      if (!cold)
        for (const auto& [name, fn] : hot)
          measure(name, r, th, [&](ThreadData& t) {
            fn(t, 2);  // warm
            return fn(t, 20);
          });
      else
        for (const auto& [name, fn] : colds) {
          measure(name, r, th, [&](ThreadData& t) { return fn(t, 8, rep0); });
          rep0 += 8;
        }
    }
  }
}
