// Probe (not part of the product; docs/cpu_amx.md "Ceilings on the AMX host"): which vector work
// runs beside the tile unit and which adds its time to it. The loop is the kernel's M <= 16 bf16
// tile loop (per k-tile one A and two B tile loads, two products; C zeroed and stored per chunk of
// 4 k-tiles), hot: A is 16 rows of K = 4096 at the kernel's stride (L2), the B tiles a static
// 2 x 16 KiB buffer. After each k-tile's products a thread runs the vector work of two B tiles,
// one of:
//   unpack        the kernel's unpacking (4 loads, 12 shifts, 16 ternary-logic ops, 16 stores
//                 into the other half of the B buffer, which the next chunk's tiles load)
//   unpack-scr    the same, stored to a scratch buffer no tile loads
//   unpack-nost   the same without the stores (values kept alive, nothing written)
//   shift         28 VPSRLW a B tile (one port on Intel's cores) in 4 chains, no memory
//   tern          28 VPTERNLOGD a B tile in 4 chains, no memory
//   shuf          28 VPSHUFB a B tile in 4 chains, no memory
//   store         16 zmm stores into the other half of the B buffer
//   store-scr     16 zmm stores to scratch
//   load          the unpacking's 4 loads of packed weights, nothing else
//   unpack-ms     an unpacking without shifts: each 16-bit lane's nibble picked by VPMULTISHIFTQB
//                 (4 per load, for a layout packed to suit it), then the same ternary-logic op and
//                 store (the bits differ from the kernel's; only the instruction mix counts here)
// each with the tile products ("tile+X") and without them ("X"), and the tile loop alone ("tile").
// If a work overlaps the tile unit, tile+X takes max(tile, X); if they share a resource, the sum.
// Reported: ns per step (one k-tile: two products and two B tiles of work) per thread, mean and
// slowest thread.
// Usage: nibble_probe_tile_vector_overlap [threads,threads,...] [rounds]
// Standalone on purpose: each probe is one experiment in one file (but for full_tiles.hpp and
// thread_counts.hpp).
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

constexpr int kK = 4096, kKTiles = kK / 32, kChunkTiles = 4;
constexpr int64_t kAStride = kK * 2 + 64;
constexpr size_t kBTile = 1024;
constexpr int kPairs = 8;  // pairs per thread: 8 x 2 x 128 x 256 B = 512 KiB of packed weights

enum class Work {
  none,
  unpack,
  unpack_scratch,
  unpack_nostore,
  shift,
  tern,
  shuf,
  store,
  store_scratch,
  load,
  unpack_multishift
};

static uint8_t* align64(std::vector<uint8_t>& v, size_t bytes) {
  v.resize(bytes + 64);
  return reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(v.data()) + 63) & ~uintptr_t(63));
}

struct ThreadData {
  std::vector<uint8_t> amem, wmem, bmem, smem;
  uint8_t *a = nullptr, *w = nullptr, *b = nullptr, *scratch = nullptr;
  alignas(64) float cbuf[2][16 * 32];

  void init(uint32_t seed) {
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
    const size_t wbytes = size_t(2 * kPairs) * kKTiles * 256;
    w = align64(wmem, wbytes);
    for (size_t i = 0; i < wbytes; ++i) w[i] = uint8_t(rng());
    b = align64(bmem, 2 * 8 * kBTile);
    for (size_t i = 0; i < 2 * 8 * kBTile; i += 2) {
      const uint16_t h = uint16_t(0x4300 | (rng() & 15));
      std::memcpy(b + i, &h, 2);
    }
    scratch = align64(smem, 2 * 8 * kBTile);
    std::memset(scratch, 0, 2 * 8 * kBTile);
  }
};

template <bool kStore>
static inline void unpack_tile(const uint8_t* src, uint8_t* dst) {
  const __m512i low = _mm512_set1_epi16(0x000F), bias = _mm512_set1_epi16(0x4300);
  for (int u = 0; u < 4; ++u) {
    const __m512i w = _mm512_loadu_si512(src + u * 64);
    __m512i n[4] = {_mm512_ternarylogic_epi32(w, low, bias, 0xEA),
                    _mm512_ternarylogic_epi32(_mm512_srli_epi16(w, 4), low, bias, 0xEA),
                    _mm512_ternarylogic_epi32(_mm512_srli_epi16(w, 8), low, bias, 0xEA),
                    _mm512_ternarylogic_epi32(_mm512_srli_epi16(w, 12), low, bias, 0xEA)};
    for (int j = 0; j < 4; ++j) {
      if constexpr (kStore)
        _mm512_store_si512(dst + (4 * u + j) * 64, n[j]);
      else
        __asm__ volatile("" : : "v"(n[j]));
    }
  }
}

// The same count of ternary-logic ops and stores with VPMULTISHIFTQB in place of the shifts.
static inline void unpack_tile_multishift(const uint8_t* src, uint8_t* dst) {
  const __m512i low = _mm512_set1_epi16(0x000F), bias = _mm512_set1_epi16(0x4300);
  __m512i ctrl[4];
  for (int j = 0; j < 4; ++j)
    ctrl[j] = _mm512_set1_epi64(int64_t(uint64_t(16 * j) | uint64_t(16 * j + 4) << 16 |
                                        uint64_t(16 * j + 8) << 32 | uint64_t(16 * j + 12) << 48));
  for (int u = 0; u < 4; ++u) {
    const __m512i w = _mm512_loadu_si512(src + u * 64);
    for (int j = 0; j < 4; ++j)
      _mm512_store_si512(
          dst + (4 * u + j) * 64,
          _mm512_ternarylogic_epi32(_mm512_multishift_epi64_epi8(ctrl[j], w), low, bias, 0xEA));
  }
}

// 28 register-only instructions of one kind in 4 independent chains (7 each).
#define CHAINS(INSN)                                                \
  __asm__ volatile(INSN INSN INSN INSN INSN INSN INSN               \
                   : "+v"(r[0]), "+v"(r[1]), "+v"(r[2]), "+v"(r[3]) \
                   : "v"(k))
#define SHIFT4 \
  "vpsrlw $1, %0, %0\n\tvpsrlw $1, %1, %1\n\tvpsrlw $1, %2, %2\n\tvpsrlw $1, %3, %3\n\t"
#define TERN4                                                        \
  "vpternlogd $0x96, %4, %4, %0\n\tvpternlogd $0x96, %4, %4, %1\n\t" \
  "vpternlogd $0x96, %4, %4, %2\n\tvpternlogd $0x96, %4, %4, %3\n\t"
#define SHUF4 \
  "vpshufb %4, %0, %0\n\tvpshufb %4, %1, %1\n\tvpshufb %4, %2, %2\n\tvpshufb %4, %3, %3\n\t"

template <Work W>
static inline void vector_work(const uint8_t* src, uint8_t* next_b, uint8_t* scratch, __m512i* r,
                               __m512i k) {
  if constexpr (W == Work::unpack) unpack_tile<true>(src, next_b);
  if constexpr (W == Work::unpack_scratch) unpack_tile<true>(src, scratch);
  if constexpr (W == Work::unpack_nostore) unpack_tile<false>(src, next_b);
  if constexpr (W == Work::unpack_multishift) unpack_tile_multishift(src, next_b);
  if constexpr (W == Work::shift) CHAINS(SHIFT4);
  if constexpr (W == Work::tern) CHAINS(TERN4);
  if constexpr (W == Work::shuf) CHAINS(SHUF4);
  if constexpr (W == Work::load)
    for (int u = 0; u < 4; ++u) __asm__ volatile("" : : "v"(_mm512_loadu_si512(src + u * 64)));
  if constexpr (W == Work::store || W == Work::store_scratch) {
    uint8_t* d = W == Work::store ? next_b : scratch;
    for (int j = 0; j < 16; ++j) _mm512_store_si512(d + j * 64, r[j & 3]);
  }
}

template <bool kTiles, Work W>
static double walk(ThreadData& t, int reps) {
  if constexpr (kTiles) configure_full_tiles();
  __m512i r[4] = {_mm512_set1_epi32(1), _mm512_set1_epi32(2), _mm512_set1_epi32(3),
                  _mm512_set1_epi32(4)};
  const __m512i k = _mm512_set1_epi32(0x01020304);
  float sink = 0;
  const auto t0 = std::chrono::steady_clock::now();
  size_t u = 0, steps = 0;
  for (int rep = 0; rep < reps; ++rep)
    for (int p = 0; p < kPairs; ++p)
      for (int c = 0; c < kKTiles / kChunkTiles; ++c, ++u) {
        const uint8_t* bs = t.b + (u & 1) * 8 * kBTile;
        uint8_t* bn = t.b + ((u + 1) & 1) * 8 * kBTile;
        if constexpr (kTiles) {
          _tile_zero(0);
          _tile_zero(1);
        }
        for (int i = 0; i < kChunkTiles; ++i, ++steps) {
          const int kt = c * kChunkTiles + i;
          const uint8_t* bb = bs + size_t(i * 2) * kBTile;
          if constexpr (kTiles) {
            _tile_loadd(4, t.a + kt * 64, kAStride);
            _tile_loadd(6, bb, 64);
            _tile_dpbf16ps(0, 4, 6);
            _tile_loadd(7, bb + kBTile, 64);
            _tile_dpbf16ps(1, 4, 7);
          }
          for (int j = 0; j < 2; ++j) {
            const uint8_t* src = t.w + (size_t(2 * p + j) * kKTiles + size_t(kt)) * 256;
            vector_work<W>(src, bn + size_t(i * 2 + j) * kBTile,
                           t.scratch + size_t(i * 2 + j) * kBTile, r, k);
          }
        }
        if constexpr (kTiles) {
          float* cc = t.cbuf[u & 1];
          _tile_stored(0, cc, 128);
          _tile_stored(1, cc + 16, 128);
          sink += cc[5];
        }
      }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if constexpr (kTiles) _tile_release();
  alignas(64) int32_t keep[16];
  _mm512_store_si512(keep,
                     _mm512_xor_si512(_mm512_xor_si512(r[0], r[1]), _mm512_xor_si512(r[2], r[3])));
  if (sink == 12345.f || keep[3] == 12345) std::puts("");
  return s / double(steps) * 1e9;
}

template <class Fn>
static void measure(const char* what, int round, std::vector<ThreadData>& th, Fn fn) {
  const int T = int(th.size());
  std::vector<double> ns(size_t(T), 0.0);
  std::atomic<int> ready{0};
  std::atomic<int> warmed{0};
  std::vector<std::thread> ts;
  for (int i = 0; i < T; ++i)
    ts.emplace_back([&, i] {
      syscall(SYS_arch_prctl, 0x1023, 18);  // ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA
      ready.fetch_add(1);
      while (ready.load() < T) {
      }
      fn(th[size_t(i)], 2);  // warm: the first tile use, the buffers in cache
      warmed.fetch_add(1);
      while (warmed.load() < T) {
      }
      ns[size_t(i)] = fn(th[size_t(i)], 60);
    });
  for (auto& x : ts) x.join();
  double sum = 0, most = 0;
  for (double x : ns) sum += x, most = std::max(most, x);
  std::printf("T=%2d round %d %-16s ns/step (2 products) mean %6.2f slowest %6.2f\n", T, round,
              what, sum / T, most);
  std::fflush(stdout);
}

int main(int argc, char** argv) {
  // Without AMX (the permission is refused) only the vector work alone runs.
  const bool tiles = syscall(SYS_arch_prctl, 0x1023, 18) == 0;
  const bool vbmi = __builtin_cpu_supports("avx512vbmi");  // unpack-ms
  const std::vector<int> counts = thread_counts(argc > 1 ? argv[1] : nullptr);
  const int rounds = argc > 2 ? std::max(1, std::atoi(argv[2])) : 5;
  using Fn = double (*)(ThreadData&, int);
  const std::pair<const char*, Fn> variants[] = {
      {"tile", walk<true, Work::none>},
      {"unpack", walk<false, Work::unpack>},
      {"tile+unpack", walk<true, Work::unpack>},
      {"unpack-scr", walk<false, Work::unpack_scratch>},
      {"tile+unpack-scr", walk<true, Work::unpack_scratch>},
      {"unpack-nost", walk<false, Work::unpack_nostore>},
      {"tile+unpack-nost", walk<true, Work::unpack_nostore>},
      {"unpack-ms", walk<false, Work::unpack_multishift>},
      {"tile+unpack-ms", walk<true, Work::unpack_multishift>},
      {"shift", walk<false, Work::shift>},
      {"tile+shift", walk<true, Work::shift>},
      {"tern", walk<false, Work::tern>},
      {"tile+tern", walk<true, Work::tern>},
      {"shuf", walk<false, Work::shuf>},
      {"tile+shuf", walk<true, Work::shuf>},
      {"store", walk<false, Work::store>},
      {"tile+store", walk<true, Work::store>},
      {"store-scr", walk<false, Work::store_scratch>},
      {"tile+store-scr", walk<true, Work::store_scratch>},
      {"load", walk<false, Work::load>},
      {"tile+load", walk<true, Work::load>},
  };
  std::printf(
      "tile loop of M <= 16 with vector work between products; K = %d, %d pairs per "
      "thread, hot%s\n",
      kK, kPairs, tiles ? "" : "; no AMX here: the tile variants are left out");
  for (int T : counts) {
    std::vector<ThreadData> th(static_cast<size_t>(T));
    for (int i = 0; i < T; ++i) th[size_t(i)].init(uint32_t(i + 1));
    for (int r = 0; r < rounds; ++r)
      for (const auto& [name, fn] : variants) {
        if (!tiles && std::strncmp(name, "tile", 4) == 0) continue;
        if (!vbmi && std::strstr(name, "-ms") != nullptr) continue;
        measure(name, r, th, fn);
      }
  }
}
