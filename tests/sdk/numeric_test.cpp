// The SDK's half and bfloat16 conversions: exact widening and round-to-nearest-even narrowing.
#include <nibble/sdk/numeric.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>

using namespace nibble::sdk;

namespace {

TEST(Numeric, HalfRoundTripsEveryFiniteValue) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    uint16_t bits = uint16_t(h);
    if ((bits & 0x7c00) == 0x7c00) continue;  // inf/NaN
    EXPECT_EQ(f32_to_f16(f16_to_f32(bits)), bits) << std::hex << h;
  }
}

TEST(Numeric, HalfKnownValues) {
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0xc000), -2.0f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(f32_to_f16(65504.f), 0x7bff);
  EXPECT_EQ(f32_to_f16(65520.f), 0x7c00);                      // rounds to infinity
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.f, -11)), 0x3c00);  // tie to even
  EXPECT_EQ(f32_to_f16(1.0f + 3 * std::ldexp(1.f, -11)), 0x3c02);
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(std::nanf("")))));
}

TEST(Numeric, NarrowingIsNearestOnRandomFloats) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> d(-1000.f, 1000.f);
  for (int i = 0; i < 100000; ++i) {
    float f = d(rng);
    float h = f16_to_f32(f32_to_f16(f));
    float b = bf16_to_f32(f32_to_bf16(f));
    EXPECT_LE(std::fabs(h - f), std::fabs(f) * std::ldexp(1.f, -11) * 1.0001f + 1e-7f);
    EXPECT_LE(std::fabs(b - f), std::fabs(f) * std::ldexp(1.f, -8) * 1.0001f);
  }
}

TEST(Numeric, DtypeNames) {
  EXPECT_EQ(dtype_name(dtype_bf16()), "bf16");
  EXPECT_EQ(dtype_name(dtype_f32()), "f32");
  EXPECT_EQ(dtype_name(DLDataType{kDLInt, 64, 1}), "i64");
}

}  // namespace
