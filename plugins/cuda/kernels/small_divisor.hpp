// Division of small counts by a divisor fixed for a block of the CUDA kernels, in host and device
// code alike (the host tests check it).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define NIBBLE_HOST_DEVICE __host__ __device__
#else
#define NIBBLE_HOST_DEVICE
#endif

namespace nibble::cuda::device {

// A multiply and a shift where the division is a sequence of about 20 instructions. Exact for
// 0 <= n < 256 and 1 <= d <= 256: with m = ceil(2^16 / d), n·m / 2^16 exceeds n / d by less than
// n / 2^16, which is less than the 1 / d between n / d's fraction and the next integer.
struct SmallDivisor {
  uint32_t d, m;
  /// A divisor d in [1, 256].
  NIBBLE_HOST_DEVICE explicit SmallDivisor(int divisor)
      : d(uint32_t(divisor)), m((65536u + uint32_t(divisor) - 1) / uint32_t(divisor)) {}
  /// n / d for n in [0, 256).
  NIBBLE_HOST_DEVICE int quot(int n) const { return int((uint32_t(n) * m) >> 16); }
  /// n % d for n in [0, 256).
  NIBBLE_HOST_DEVICE int rem(int n) const { return n - quot(n) * int(d); }
};

}  // namespace nibble::cuda::device
