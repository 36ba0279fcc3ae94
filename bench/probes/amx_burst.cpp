// Probe (not part of the product; docs/cpu_amx.md "Ceilings on the AMX host"): what a short burst
// of tile products costs on each of T threads when it follows a gap, as a forward of a small layer
// does (the tile kernels of a 2048×2048 layer at M = 16 run about 8 µs of products per thread at 16
// threads, while the whole call takes 50 µs and more). Per round every thread waits out the gap
// (spinning with pause, or asleep as a parked worker), meets the others at a spin barrier, then
// times its burst: tile configuration, 512 bf16 products of two chains on L1 operands (A and B
// tiles loaded per product, as the kernels do), C stored, tiles released. The same with an
// AVX-512 burst (VDPBF16PS chains of about the same length) tells a tile-unit effect from a
// core-wide one. Reported per variant and gap: the median over rounds of the median and of the
// slowest thread's burst, in µs, and against the same burst run back to back.
// Usage: nibble_probe_amx_burst [threads] [rounds]
// Standalone on purpose: each probe is one experiment in one file (the tile configuration comes
// from full_tiles.hpp).
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
#include <thread>
#include <vector>

#include "full_tiles.hpp"

struct alignas(64) Operands {
  uint8_t a[16 * 64];
  uint8_t b[2][1024];
  uint8_t c[2][1024];
};

using Clock = std::chrono::steady_clock;

constexpr int kProducts = 512;

static void amx_burst(Operands& m) {
  configure_full_tiles();
  _tile_zero(0);
  _tile_zero(1);
  for (int i = 0; i < kProducts / 2; ++i) {
    _tile_loadd(4, m.a, 64);
    _tile_loadd(6, m.b[0], 64);
    _tile_dpbf16ps(0, 4, 6);
    _tile_loadd(7, m.b[1], 64);
    _tile_dpbf16ps(1, 4, 7);
  }
  _tile_stored(0, m.c[0], 64);
  _tile_stored(1, m.c[1], 64);
  _tile_release();
}

// Eight independent VDPBF16PS chains, about as long as the tile burst at one product per 16 ns.
static void avx512_burst(Operands& m) {
  __m512 acc[8];
  for (int j = 0; j < 8; ++j) acc[j] = _mm512_loadu_ps(m.c[0] + 64 * j);
  const __m512bh x = (__m512bh)_mm512_loadu_si512(m.a);
  const __m512bh y = (__m512bh)_mm512_loadu_si512(m.b[0]);
  for (int i = 0; i < kProducts * 5; ++i)
    for (int j = 0; j < 8; ++j) acc[j] = _mm512_dpbf16_ps(acc[j], x, y);
  for (int j = 0; j < 8; ++j) _mm512_storeu_ps(m.c[0] + 64 * j, acc[j]);
}

struct Variant {
  const char* name;
  void (*burst)(Operands&);
  bool sleep;  // wait out the gap asleep (else spinning)
};

// Per round: every thread waits `gap_us`, meets the others, times one burst. Returns per round
// the median and the largest burst time over the threads, in µs.
static void run(const Variant& v, int threads, int rounds, int gap_us, std::vector<double>* med,
                std::vector<double>* worst) {
  std::atomic<int> arrived{0};
  std::vector<std::vector<double>> us(rounds, std::vector<double>(threads));
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([&, t] {
      syscall(SYS_arch_prctl, 0x1023, 18);
      Operands* m = static_cast<Operands*>(std::aligned_alloc(64, sizeof(Operands)));
      std::memset(m, 0x11, sizeof(Operands));
      v.burst(*m);  // first use: the kernel's tile state allocation, L1
      for (int r = 0; r < rounds; ++r) {
        if (gap_us > 0) {
          if (v.sleep) {
            std::this_thread::sleep_for(std::chrono::microseconds(gap_us));
          } else {
            const auto until = Clock::now() + std::chrono::microseconds(gap_us);
            while (Clock::now() < until) _mm_pause();
          }
        }
        arrived.fetch_add(1);
        while (arrived.load() < threads * (r + 1)) _mm_pause();
        const auto t0 = Clock::now();
        v.burst(*m);
        us[r][t] = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
      }
      std::free(m);
    });
  for (auto& t : ts) t.join();
  for (int r = 0; r < rounds; ++r) {
    std::vector<double> x = us[r];
    std::sort(x.begin(), x.end());
    med->push_back(x[x.size() / 2]);
    worst->push_back(x.back());
  }
}

static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int main(int argc, char** argv) {
  syscall(SYS_arch_prctl, 0x1023, 18);
  const int threads = argc > 1 ? std::atoi(argv[1]) : 1;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 50;
  const Variant vs[] = {{"amx spin", amx_burst, false},
                        {"amx sleep", amx_burst, true},
                        {"avx512 spin", avx512_burst, false},
                        {"avx512 sleep", avx512_burst, true}};
  const int gaps[] = {0, 20, 100, 500, 2000, 10000};
  std::printf(
      "threads %d, rounds %d: burst of %d tile products (or VDPBF16PS chains) after a gap, "
      "median over rounds of the median / slowest thread, µs, and against gap 0\n",
      threads, rounds, kProducts);
  for (const Variant& v : vs) {
    double base = 0;
    for (int gap : gaps) {
      std::vector<double> med, worst;
      run(v, threads, rounds, gap, &med, &worst);
      const double m = median(med), w = median(worst);
      if (gap == 0) base = m;
      std::printf("%-13s gap %6d us: median %7.2f us, slowest %7.2f us, median vs gap 0 %.2f\n",
                  v.name, gap, m, w, m / base);
    }
  }
}
