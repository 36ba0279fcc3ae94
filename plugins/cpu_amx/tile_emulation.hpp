// AMX tile instructions in software, for builds that test the tile kernels on CPUs without AMX
// (NIBBLE_CPU_AMX_TILE_EMULATION): the AMX kernel files include this through amx_tiles.hpp, and
// their _tile_* calls then run here, on eight 1 KiB tiles per thread, as the hardware keeps them
// per thread. Shapes follow the loaded configuration; a tile instruction without one, or with
// shapes that do not fit together, stops the process with a message, where the hardware would
// fault. Tile loads and stores are plain C++ reads and writes, so a sanitizer sees every byte a
// kernel loads. Products follow the instructions' definitions (Intel SDM, TDPBF16PS and TDPB[SU]D):
// bf16 pairs multiplied exactly in fp32 and added one after the other with denormal inputs and
// outputs flushed to zero, int8 quads summed into int32 with wrap-around. Slow; never for speed.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace nibble::cpu_amx::tile_emulation {

struct State {
  bool configured = false;
  uint16_t colsb[8] = {};
  uint8_t rows[8] = {};
  alignas(64) uint8_t tile[8][1024] = {};
};

inline State& state() {
  thread_local State s;
  return s;
}

[[noreturn]] inline void fault(const char* what, int t) {
  std::fprintf(stderr, "cpu_amx tile emulation: %s (tile %d)\n", what, t);
  std::abort();
}

inline State& configured(int t) {
  State& s = state();
  if (!s.configured) fault("tile instruction without a loaded tile configuration", t);
  if (t < 0 || t >= 8) fault("no such tile", t);
  if (s.rows[t] == 0) fault("tile left unconfigured (no rows)", t);
  return s;
}

/// LDTILECFG: palette 1 only, as the kernels use; rows and bytes per row of tiles 0-7.
inline void load_config(const void* config) {
  const auto* c = static_cast<const uint8_t*>(config);
  State& s = state();
  if (c[0] != 1) fault("palette other than 1", -1);
  for (int t = 0; t < 8; ++t) {
    uint16_t colsb;
    std::memcpy(&colsb, c + 16 + 2 * t, sizeof colsb);
    s.colsb[t] = colsb;
    s.rows[t] = c[48 + t];
    if (colsb > 64 || s.rows[t] > 16) fault("tile shape larger than 16 rows of 64 bytes", t);
    if ((colsb == 0) != (s.rows[t] == 0))
      fault("tile with rows but no bytes, or bytes but no rows", t);
  }
  s.configured = true;
  std::memset(s.tile, 0, sizeof s.tile);
}

/// TILERELEASE.
inline void release() { state() = State{}; }

inline void zero(int t) { std::memset(configured(t).tile[t], 0, 1024); }

/// TILELOADD: `rows` rows of `colsb` bytes, `stride` bytes apart; the rest of the tile is zero.
inline void load(int t, const void* base, long stride) {
  State& s = configured(t);
  std::memset(s.tile[t], 0, 1024);
  for (int r = 0; r < s.rows[t]; ++r)
    std::memcpy(s.tile[t] + 64 * r, static_cast<const uint8_t*>(base) + r * stride, s.colsb[t]);
}

/// TILESTORED.
inline void store(int t, void* base, long stride) {
  State& s = configured(t);
  for (int r = 0; r < s.rows[t]; ++r)
    std::memcpy(static_cast<uint8_t*>(base) + r * stride, s.tile[t] + 64 * r, s.colsb[t]);
}

// A tile product's operands: C (M rows × N 32-bit lanes) += A (M × K 32-bit groups) · B (K rows
// × N groups), with the shapes the instructions require of the configuration.
struct Product {
  State& s;
  int M, N, K;
};

inline Product product(int c, int a, int b) {
  State& s = configured(c);
  configured(a);
  configured(b);
  if (s.rows[c] != s.rows[a] || s.colsb[c] != s.colsb[b] || s.rows[b] != s.colsb[a] / 4)
    fault("tile shapes do not fit together in a tile product", c);
  return {s, s.rows[c], s.colsb[c] / 4, s.rows[b]};
}

inline float flush(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  if ((bits & 0x7f800000u) == 0) bits &= 0x80000000u;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

inline float bf16_value(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, sizeof h);
  const uint32_t bits = uint32_t(h) << 16;
  float v;
  std::memcpy(&v, &bits, sizeof v);
  return flush(v);
}

/// TDPBF16PS: C[m][n] += A[m][2k]·B[k][2n] + A[m][2k+1]·B[k][2n+1].
inline void dpbf16ps(int c, int a, int b) {
  const auto [s, M, N, K] = product(c, a, b);
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      float acc;
      std::memcpy(&acc, s.tile[c] + 64 * m + 4 * n, sizeof acc);
      for (int k = 0; k < K; ++k) {
        const uint8_t* pa = s.tile[a] + 64 * m + 4 * k;
        const uint8_t* pb = s.tile[b] + 64 * k + 4 * n;
        acc = flush(acc + bf16_value(pa) * bf16_value(pb));
        acc = flush(acc + bf16_value(pa + 2) * bf16_value(pb + 2));
      }
      std::memcpy(s.tile[c] + 64 * m + 4 * n, &acc, sizeof acc);
    }
}

/// TDPB{S,U}{S,U}D: C[m][n] += Σ_i A[m][4k+i]·B[k][4n+i] over int8 (signed or unsigned each).
template <bool SignedA, bool SignedB>
inline void dp_int8(int c, int a, int b) {
  const auto [s, M, N, K] = product(c, a, b);
  auto value = [](uint8_t byte, bool is_signed) {
    return is_signed ? int32_t(int8_t(byte)) : int32_t(byte);
  };
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      uint32_t acc;
      std::memcpy(&acc, s.tile[c] + 64 * m + 4 * n, sizeof acc);
      for (int k = 0; k < K; ++k)
        for (int i = 0; i < 4; ++i)
          acc += uint32_t(value(s.tile[a][64 * m + 4 * k + i], SignedA) *
                          value(s.tile[b][64 * k + 4 * n + i], SignedB));
      std::memcpy(s.tile[c] + 64 * m + 4 * n, &acc, sizeof acc);
    }
}

}  // namespace nibble::cpu_amx::tile_emulation

#undef _tile_zero
#undef _tile_loadd
#undef _tile_stored
#undef _tile_dpbf16ps
#undef _tile_dpbssd
#undef _tile_dpbsud
#define _tile_zero(t) ::nibble::cpu_amx::tile_emulation::zero(t)
#define _tile_loadd(t, base, stride) ::nibble::cpu_amx::tile_emulation::load(t, base, long(stride))
#define _tile_stored(t, base, stride) \
  ::nibble::cpu_amx::tile_emulation::store(t, base, long(stride))
#define _tile_dpbf16ps(c, a, b) ::nibble::cpu_amx::tile_emulation::dpbf16ps(c, a, b)
#define _tile_dpbssd(c, a, b) ::nibble::cpu_amx::tile_emulation::dp_int8<true, true>(c, a, b)
#define _tile_dpbsud(c, a, b) ::nibble::cpu_amx::tile_emulation::dp_int8<true, false>(c, a, b)
#define _tile_release() ::nibble::cpu_amx::tile_emulation::release()
