// The tile configuration every AMX probe runs with: palette 1, tiles 0-7 each 16 rows of 64
// bytes. Loaded with inline ldtilecfg on the whole 64-byte struct (GCC 12 miscompiles
// _tile_loadconfig(): the stores that fill the struct die).
#pragma once

#include <cstdint>

struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

/// Configures tiles 0-7 as 16 rows × 64 bytes on the calling thread.
inline void configure_full_tiles() {
  TileConfig cfg;
  for (int i = 0; i < 8; ++i) {
    cfg.rows[i] = 16;
    cfg.colsb[i] = 64;
  }
  __asm__ volatile("ldtilecfg %0" : : "m"(cfg) : "memory");
}
