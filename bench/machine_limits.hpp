// The machine's limits, measured by the bench itself next to the kernels: a STREAM-like read
// bandwidth over a buffer larger than the last-level cache, and AMX tile loops for the bf16 and
// int8 peaks, register-only and with operand loads (the AMX unit may be shared: a peak from a
// minute ago means little).
#pragma once

#include <nibble/sdk/host/device.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>

namespace nibble::bench {

/// Last-level cache size in bytes (sysfs; 32 MiB when unknown).
size_t l3_bytes();

/// Whether the bench's own AMX peak probes below can run: AMX tiles (bf16 and int8) reported by
/// CPUID and permitted by the kernel. Kept here on purpose, and for nothing else: the peaks
/// measure the machine, not a backend, so they cannot ask a plugin; which ISA a backend runs is
/// its probe's to say (Plugin::probe_detail), and the bench reports that, never this.
bool amx_usable();

/// A memory-bandwidth probe the bench samples between rounds.
class BandwidthProbe {
 public:
  virtual ~BandwidthProbe() = default;
  /// One measurement, GB/s.
  virtual double sample() const = 0;
};

/// A read-bandwidth probe over a buffer first-touched by the threads that read it.
class ReadBandwidth final : public BandwidthProbe {
 public:
  ReadBandwidth(size_t bytes, int threads);
  ~ReadBandwidth() override;
  /// One pass over the whole buffer with `threads` threads, 4 streams each; GB/s.
  double sample() const override;

 private:
  uint64_t* data_ = nullptr;
  size_t words_ = 0;
  int threads_ = 1;
};

/// A device's memory bandwidth: one device-to-device copy of `bytes` through the plugin's device
/// memory, timed to its synchronize, counting the bytes read and written (as STREAM's copy does).
/// A kernel that mostly reads its weights is compared against this.
class DeviceCopyBandwidth final : public BandwidthProbe {
 public:
  DeviceCopyBandwidth(const sdk::host::Device& device, size_t bytes);
  double sample() const override;

 private:
  sdk::host::Device device_;
  sdk::host::DeviceBuffer from_, to_;
};

/// Register-only TDPBF16PS / TDPBSSD loops (random operands) on `threads` threads for about
/// `seconds`: TFLOP/s (bf16) or TOP/s (int8). Only call when amx_usable().
double amx_bf16_peak(int threads, double seconds);
double amx_int8_peak(int threads, double seconds);
/// The same 2×2 tile loop reloading its 4 operand tiles from L1 every iteration: the most a tile
/// GEMM can reach on this machine once its operands come from memory.
double amx_bf16_loaded_peak(int threads, double seconds);
double amx_int8_loaded_peak(int threads, double seconds);

}  // namespace nibble::bench
