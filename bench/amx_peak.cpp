// AMX tile loops: per thread 4 accumulator tiles (a 2×2 block of 16×16 outputs) and 4 operand
// tiles of random data, 4 independent tile dot products per iteration. The peak loads the operands
// once (no memory traffic); the loaded variant reloads all 4 operand tiles from L1 every iteration,
// as any GEMM whose operands come from memory must (2×2 is the most reuse 8 tile registers allow:
// one tile load per dot product). Built with AMX flags; called only after amx_usable(). The tile
// config is loaded with an inline `ldtilecfg` that reads the whole 64 bytes (GCC 12's
// _tile_loadconfig() lets the stores filling it die).
#include <immintrin.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "machine_limits.hpp"

namespace nibble::bench {
namespace {

struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Operand tiles A0, A1, B0, B1 (1 KB each), two sets alternating so consecutive loads differ.
// Random data (normal bf16 values, uniform int8 bytes): the tile unit is measurably faster on
// zeros (on the AMX host, 12-22 % for bf16, about 7 % for int8).
using Operands = std::array<std::array<std::array<uint8_t, 1024>, 4>, 2>;
Operands random_operands(bool bf16) {
  Operands o{};
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (auto& set : o)
    for (auto& tile : set)
      for (size_t i = 0; i < tile.size(); i += 2) {
        uint16_t h = uint16_t(rng());
        if (bf16) {
          const float f = nd(rng);
          uint32_t u;
          std::memcpy(&u, &f, 4);
          h = uint16_t(u >> 16);
        }
        std::memcpy(&tile[i], &h, 2);
      }
  return o;
}

template <bool Bf16, bool Loaded>
uint64_t tile_loop(double seconds) {
  TileConfig cfg;
  for (int i = 0; i < 8; ++i) {
    cfg.rows[i] = 16;
    cfg.colsb[i] = 64;
  }
  __asm__ volatile("ldtilecfg %0" : : "m"(cfg) : "memory");
  alignas(64) static const Operands operands = random_operands(Bf16);  // 64-byte tile rows
  _tile_loadd(4, operands[0][0].data(), 64);
  _tile_loadd(5, operands[0][1].data(), 64);
  _tile_loadd(6, operands[0][2].data(), 64);
  _tile_loadd(7, operands[0][3].data(), 64);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  uint64_t iters = 0;
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    for (int i = 0; i < 256; ++i) {
      if constexpr (Loaded) {
        const auto& op = operands[size_t(i & 1)];
        _tile_loadd(4, op[0].data(), 64);
        _tile_loadd(5, op[1].data(), 64);
        _tile_loadd(6, op[2].data(), 64);
        _tile_loadd(7, op[3].data(), 64);
      }
      if constexpr (Bf16) {
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
    iters += 256;
  }
  _tile_release();
  return iters;
}

template <bool Bf16, bool Loaded>
double peak(int threads, double seconds) {
  std::vector<std::thread> ts;
  std::vector<uint64_t> iters(static_cast<size_t>(threads));
  std::atomic<int> ready{0};
  const auto t0 = std::chrono::steady_clock::now();
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([&, t] {
      ready.fetch_add(1);
      while (ready.load() < threads) {
      }
      iters[size_t(t)] = tile_loop<Bf16, Loaded>(seconds);
    });
  for (auto& t : ts) t.join();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // One 16×16 output tile over K = 32 bf16 (16,384 FLOP) or K = 64 int8 (32,768 OP).
  const double per = Bf16 ? 2.0 * 16 * 16 * 32 : 2.0 * 16 * 16 * 64;
  uint64_t total = 0;
  for (uint64_t i : iters) total += i;
  return double(total) * 4 * per / s / 1e12;
}

}  // namespace

double amx_bf16_peak(int threads, double seconds) { return peak<true, false>(threads, seconds); }
double amx_int8_peak(int threads, double seconds) { return peak<false, false>(threads, seconds); }
double amx_bf16_loaded_peak(int threads, double seconds) {
  return peak<true, true>(threads, seconds);
}
double amx_int8_loaded_peak(int threads, double seconds) {
  return peak<false, true>(threads, seconds);
}

}  // namespace nibble::bench
