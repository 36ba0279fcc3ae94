// Probe (not part of the product; docs/cpu_amx.md "Ceilings on the AMX host"): does AMX tile
// throughput depend on the operands' data, and what do operand loads cost? The 2x2 tile loop
// register-only and with its 4 operand tiles reloaded from L1 each iteration, on zero and on
// random operands, back to back in every round.
// Usage: nibble_probe_tile_operand_data [threads] [rounds]
// Standalone on purpose: each probe is one experiment in one file, so it repeats what it needs
// of the kernels, of amx_peak.cpp and of the other probes rather than sharing code with them (but
// for the tile configuration, full_tiles.hpp).
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "full_tiles.hpp"
alignas(64) static uint8_t ops[2][2][4][1024];  // [random?][set][tile]
template <bool Bf16, bool Loaded>
static double loop(int rnd, long iters) {
  configure_full_tiles();
  _tile_loadd(4, ops[rnd][0][0], 64);
  _tile_loadd(5, ops[rnd][0][1], 64);
  _tile_loadd(6, ops[rnd][0][2], 64);
  _tile_loadd(7, ops[rnd][0][3], 64);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (long i = 0; i < iters; ++i) {
    if (Loaded) {
      const auto& o = ops[rnd][i & 1];
      _tile_loadd(4, o[0], 64);
      _tile_loadd(5, o[1], 64);
      _tile_loadd(6, o[2], 64);
      _tile_loadd(7, o[3], 64);
    }
    if (Bf16) {
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(1, 4, 7);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    } else {
      _tile_dpbssd(0, 4, 6);
      _tile_dpbssd(1, 4, 7);
      _tile_dpbssd(2, 5, 6);
      _tile_dpbssd(3, 5, 7);
    }
  }
  alignas(64) static thread_local uint8_t sink[1024];
  _tile_stored(0, sink, 64);
  _tile_release();
  return double(iters) * 4 * 2.0 * 16 * 16 * (Bf16 ? 32 : 64);
}
template <bool Bf16, bool Loaded>
static double run(int threads, int rnd) {
  std::vector<std::thread> ts;
  std::vector<double> f(threads);
  std::atomic<int> ready{0};
  auto t0 = std::chrono::steady_clock::now();
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([&, t] {
      syscall(SYS_arch_prctl, 0x1023, 18);
      ready++;
      while (ready < threads) {
      }
      f[t] = loop<Bf16, Loaded>(rnd, 100000);
    });
  for (auto& t : ts) t.join();
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  double tot = 0;
  for (double x : f) tot += x;
  return tot / s / 1e12;
}
int main(int argc, char** argv) {
  syscall(SYS_arch_prctl, 0x1023, 18);
  int threads = argc > 1 ? atoi(argv[1]) : 2, rounds = argc > 2 ? atoi(argv[2]) : 15;
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (int s = 0; s < 2; ++s)
    for (int t = 0; t < 4; ++t)
      for (int i = 0; i < 1024; i += 2) {
        float f = nd(rng);
        uint32_t u;
        std::memcpy(&u, &f, 4);
        uint16_t h = u >> 16;
        std::memcpy(&ops[1][s][t][i], &h, 2);
      }
  struct V {
    const char* name;
    double (*fn)(int, int);
    int rnd;
  };
  V vs[] = {{"bf16 regs zero", run<true, false>, 0},  {"bf16 regs rand", run<true, false>, 1},
            {"bf16 load zero", run<true, true>, 0},   {"bf16 load rand", run<true, true>, 1},
            {"int8 regs zero", run<false, false>, 0}, {"int8 regs rand", run<false, false>, 1},
            {"int8 load zero", run<false, true>, 0},  {"int8 load rand", run<false, true>, 1}};
  std::vector<std::vector<double>> r(8), rel(8);
  for (int k = 0; k < rounds; ++k) {
    double got[8];
    for (int i = 0; i < 8; ++i) {
      got[i] = vs[i].fn(threads, vs[i].rnd);
      r[i].push_back(got[i]);
    }
    for (int i = 0; i < 8; ++i) rel[i].push_back(got[i] / got[i < 4 ? 0 : 4]);
  }
  for (int i = 0; i < 8; ++i) {
    auto a = r[i], b = rel[i];
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    printf("%-16s med %.2f T/s  vs regs-zero %.2f [%.2f..%.2f]\n", vs[i].name, a[a.size() / 2],
           b[b.size() / 2], b[b.size() / 4], b[b.size() * 3 / 4]);
  }
}
