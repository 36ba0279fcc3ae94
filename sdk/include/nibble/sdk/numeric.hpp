// Portable number conversions shared by plugins and the host: IEEE half and bfloat16 to and from
// float, with round-to-nearest-even, and DLPack dtype helpers. Header-only, no ISA assumptions.
#pragma once

#include <dlpack/dlpack.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

namespace nibble::sdk {

/// Reinterpret the bits of a float.
inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

/// Build a float from its bits.
inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

/// bfloat16 bits to float (exact).
inline float bf16_to_f32(uint16_t h) { return bits_float(uint32_t(h) << 16); }

/// float to bfloat16 bits, round-to-nearest-even; NaN stays NaN (quiet).
inline uint16_t f32_to_bf16(float f) {
  uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

/// IEEE binary16 bits to float (exact, subnormals included).
inline float f16_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  if (exp == 0x1f) return bits_float(sign | 0x7f800000u | (man << 13));
  if (exp == 0) {
    if (man == 0) return bits_float(sign);
    // subnormal: man * 2^-24
    float v = float(man) * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  return bits_float(sign | ((exp + 112u) << 23) | (man << 13));
}

/// float to IEEE binary16 bits, round-to-nearest-even, overflow to infinity.
inline uint16_t f32_to_f16(float f) {
  uint32_t u = float_bits(f);
  uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return uint16_t(sign | 0x7e00u);   // NaN
  if (a >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (a < 0x38800000u) {                                  // below the smallest normal half
    if (a < 0x33000000u) return sign;                     // rounds to zero
    uint32_t e = a >> 23;
    uint32_t m = (a & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - e;  // 14 .. 24
    uint32_t r = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (r & 1u))) ++r;
    return uint16_t(sign | r);
  }
  uint32_t r = a - 0x38000000u;  // rebias exponent 127 -> 15
  r = (r + 0xfffu + ((r >> 13) & 1u)) >> 13;
  return uint16_t(sign | r);
}

/// The DLPack dtype of a 32-bit float.
constexpr DLDataType dtype_f32() { return DLDataType{kDLFloat, 32, 1}; }
/// The DLPack dtype of IEEE half.
constexpr DLDataType dtype_f16() { return DLDataType{kDLFloat, 16, 1}; }
/// The DLPack dtype of bfloat16.
constexpr DLDataType dtype_bf16() { return DLDataType{kDLBfloat, 16, 1}; }
/// The DLPack dtype of int32.
constexpr DLDataType dtype_i32() { return DLDataType{kDLInt, 32, 1}; }
/// The DLPack dtype of int64.
constexpr DLDataType dtype_i64() { return DLDataType{kDLInt, 64, 1}; }

/// Whether two DLPack dtypes are the same.
constexpr bool same_dtype(DLDataType a, DLDataType b) {
  return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes;
}

/// Whether the dtype is f32, f16 or bf16 (the activation dtypes nibble passes).
constexpr bool is_float_dtype(DLDataType d) {
  return same_dtype(d, dtype_f32()) || same_dtype(d, dtype_f16()) || same_dtype(d, dtype_bf16());
}

/// A short name for a dtype ("f32", "bf16", "i32", ...).
inline std::string dtype_name(DLDataType d) {
  // snprintf rather than string concatenation: GCC 12 at -O3 warns falsely (-Wrestrict) on the
  // latter.
  const char* base = d.code == kDLFloat    ? "f"
                     : d.code == kDLBfloat ? "bf"
                     : d.code == kDLInt    ? "i"
                     : d.code == kDLUInt   ? "u"
                                           : nullptr;
  char buf[48];
  if (base && d.lanes == 1)
    std::snprintf(buf, sizeof buf, "%s%d", base, int(d.bits));
  else if (base)
    std::snprintf(buf, sizeof buf, "%s%dx%d", base, int(d.bits), int(d.lanes));
  else
    std::snprintf(buf, sizeof buf, "code%d_%dx%d", int(d.code), int(d.bits), int(d.lanes));
  return buf;
}

/// Bytes per element of a (single-lane) dtype.
constexpr size_t dtype_bytes(DLDataType d) { return size_t(d.bits) / 8 * d.lanes; }

/// Read element i of an f32/f16/bf16 array as float.
inline float load_float(const void* base, DLDataType d, size_t i) {
  if (d.bits == 32) return static_cast<const float*>(base)[i];
  uint16_t h = static_cast<const uint16_t*>(base)[i];
  return d.code == kDLBfloat ? bf16_to_f32(h) : f16_to_f32(h);
}

/// Write element i of an f32/f16/bf16 array from float (round-to-nearest-even).
inline void store_float(void* base, DLDataType d, size_t i, float v) {
  if (d.bits == 32) {
    static_cast<float*>(base)[i] = v;
    return;
  }
  static_cast<uint16_t*>(base)[i] = d.code == kDLBfloat ? f32_to_bf16(v) : f32_to_f16(v);
}

}  // namespace nibble::sdk
