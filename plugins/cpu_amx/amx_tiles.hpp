// What the AMX tile kernels (kernels_amx.cpp, kernels_amx_dequant.cpp) share: the tile
// configuration and its scope, the B tile size and per-thread scratch. Included only by files built
// with the AMX flags (or with NIBBLE_AMX_EMULATION, whose tile_emulation.hpp then stands in for the
// tile instructions). The configuration is loaded with inline `ldtilecfg` whose operand is the
// whole 64-byte struct: GCC 12's _tile_loadconfig() declares only 8 bytes read and lets the stores
// die.
#pragma once

#include "avx512_common.hpp"

#include <vector>

#ifdef NIBBLE_AMX_EMULATION
#include "tile_emulation.hpp"
#endif

namespace nibble::cpu_amx::amx_tiles {

struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

// Tiles 0-3: C (2 row blocks × 2 panels); 4-5: A (two row blocks); 6-7: B (two panels), all
// 64 bytes wide. The first row block's A and C tiles (4, 0, 1) have `rows` rows, the second's
// (5, 2, 3) `second_rows` (default: as many): fewer than 16 when M is small, as a tile product
// costs in proportion to its rows. B always 16.
class TileScope {
 public:
  explicit TileScope(int rows, int second_rows = -1) {
    if (second_rows < 0) second_rows = rows;
    TileConfig cfg;
    for (int i = 0; i < 8; ++i) {
      const bool second = i == 2 || i == 3 || i == 5;
      cfg.rows[i] = uint8_t(i >= 6 ? 16 : second ? second_rows : rows);
      // A tile of no rows is left unconfigured: LDTILECFG faults on rows without bytes or
      // bytes without rows.
      cfg.colsb[i] = cfg.rows[i] == 0 ? 0 : 64;
    }
#ifdef NIBBLE_AMX_EMULATION
    tile_emulation::load_config(&cfg);
#else
    __asm__ volatile("ldtilecfg %0" : : "m"(cfg) : "memory");
#endif
  }
  ~TileScope() { _tile_release(); }
  TileScope(const TileScope&) = delete;
  TileScope& operator=(const TileScope&) = delete;
};

constexpr int kBTile = 1024;  // bytes of one B tile

/// `bytes` of v from a 64-byte boundary (v grows to hold them and keeps its size after).
template <class T>
T* aligned_scratch(std::vector<uint8_t>& v, size_t bytes) {
  v.resize(bytes + 64);
  return reinterpret_cast<T*>((reinterpret_cast<uintptr_t>(v.data()) + 63) & ~uintptr_t(63));
}

}  // namespace nibble::cpu_amx::amx_tiles
