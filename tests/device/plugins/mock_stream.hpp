// The stream a host hands the mock device plugin (mock_device.cpp): a counter block the host
// owns. The plugin takes a non-null stream as a MockStream and counts what was queued on it, so a
// test sees that the stream it passed is the one the kernel got.
#pragma once

#include <atomic>
#include <cstdint>

namespace nibble::test {

/// The first field of every MockStream, checked by the plugin before it counts anything.
constexpr uint64_t kMockStreamMagic = 0x6d6f636b73747265ull;  // "mockstre"

/// A mock device stream: what the plugin queued on it.
struct MockStream {
  uint64_t magic = kMockStreamMagic;
  std::atomic<uint64_t> forwards{0};      ///< forward calls queued
  std::atomic<uint64_t> copies{0};        ///< copies queued
  std::atomic<uint64_t> synchronizes{0};  ///< synchronize calls
};

}  // namespace nibble::test
