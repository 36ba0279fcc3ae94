// Helpers for the cpu_amx tests: the plugin loaded once per process, the ISA levels this machine
// has, and one call of a quantized linear layer with poisoned, strided outputs.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>

#include "plugin_harness.hpp"
#include "reference.hpp"

namespace nibble::test {

/// The cpu_amx plugin, loaded through its C ABI.
inline HarnessPlugin& cpu_amx() {
  static HarnessPlugin p("cpu_amx");
  return p;
}

/// The probe's answer as seen now.
inline nibble_probe_result cpu_amx_probe() {
  nibble_probe_result r{};
  r.struct_size = sizeof r;
  EXPECT_EQ(cpu_amx().plugin().probe(&r), NIBBLE_OK);
  return r;
}

/// Sets NIBBLE_MAX_ISA for its lifetime (the plugin re-reads it at every probe and prepare).
class MaxIsa {
 public:
  explicit MaxIsa(const std::string& level) {
    if (const char* old = std::getenv("NIBBLE_MAX_ISA")) old_ = old, had_ = true;
    if (level.empty())
      unsetenv("NIBBLE_MAX_ISA");
    else
      setenv("NIBBLE_MAX_ISA", level.c_str(), 1);
  }
  ~MaxIsa() {
    if (had_)
      setenv("NIBBLE_MAX_ISA", old_.c_str(), 1);
    else
      unsetenv("NIBBLE_MAX_ISA");
  }
  MaxIsa(const MaxIsa&) = delete;
  MaxIsa& operator=(const MaxIsa&) = delete;

 private:
  std::string old_;
  bool had_ = false;
};

/// The ISA level the probe reports ("scalar", "avx2", "avx512" or "amx").
inline std::string probed_isa() {
  std::string d = cpu_amx_probe().detail;
  auto at = d.find("isa=");
  if (at == std::string::npos) return "";
  auto end = d.find(';', at);
  return d.substr(at + 4, end - at - 4);
}

/// Every level from scalar up to what this machine supports.
inline std::vector<std::string> isa_levels_here() {
  MaxIsa none("");
  const std::vector<std::string> all = {"scalar", "avx2", "avx512", "amx"};
  const std::string top = probed_isa();
  std::vector<std::string> out;
  for (const auto& l : all) {
    out.push_back(l);
    if (l == top) break;
  }
  return out;
}

/// The result of one forward call.
struct LinearResult {
  nibble_status status = NIBBLE_INTERNAL;
  std::string message;
  std::vector<uint8_t> bytes;  ///< y as stored, row stride `stride`
  int64_t stride = 0;
  std::vector<double> values;     ///< y[M][N] as double
  size_t non_finite = 0;          ///< in y[:, :N]
  bool padding_untouched = true;  ///< the elements past N in each row kept their poison
};

/// Run `layer` on x with a poisoned output of row stride N + 3 in x's dtype.
inline LinearResult run_linear(const PreparedLayer& layer, const Activations& x, int64_t N,
                               int threads = 2) {
  LinearResult r;
  const int64_t M = x.M;
  r.stride = N + 3;
  const size_t eb = sdk::dtype_bytes(x.dtype);
  r.bytes.resize(size_t(M * r.stride) * eb + 8);
  poison(r.bytes, x.dtype);
  const std::vector<uint8_t> poisoned = r.bytes;
  int64_t xshape[2] = {M, x.K};
  DLTensor xt{};
  xt.data = const_cast<uint8_t*>(x.bytes.data());
  xt.device = DLDevice{kDLCPU, 0};
  xt.ndim = 2;
  xt.dtype = x.dtype;
  xt.shape = xshape;
  int64_t yshape[2] = {M, N};
  int64_t ystrides[2] = {r.stride, 1};
  DLTensor yt = xt;
  yt.data = r.bytes.data();
  yt.shape = yshape;
  yt.strides = ystrides;
  r.status = layer.forward(&xt, &yt, nullptr, nullptr, threads, &r.message);
  r.values.resize(size_t(M * N));
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      double v = sdk::load_float(r.bytes.data(), x.dtype, size_t(m * r.stride + n));
      if (!std::isfinite(v)) ++r.non_finite;
      r.values[size_t(m * N + n)] = v;
    }
    for (int64_t n = N; n < r.stride; ++n) {
      size_t at = size_t(m * r.stride + n) * eb;
      if (std::memcmp(&r.bytes[at], &poisoned[at], eb) != 0) r.padding_untouched = false;
    }
  }
  return r;
}

/// An exec of `threads` over a workspace of `bytes` that the caller made: `storage` is sized to
/// hold it 64-byte aligned (a call through the C ABI with nothing of the harness inside it).
inline nibble_exec caller_exec(std::vector<uint8_t>& storage, size_t bytes, int threads) {
  storage.resize(bytes + 64);
  const auto at = reinterpret_cast<uintptr_t>(storage.data());
  nibble_exec e{};
  e.struct_size = sizeof e;
  e.workspace = reinterpret_cast<void*>((at + 63) & ~uintptr_t(63));
  e.workspace_size = bytes;
  e.num_threads = threads;
  return e;
}

/// The layer descriptor of `w` for the given numeric mode.
inline nibble_layer_desc desc_for(const CanonicalWeight& w, int mode) {
  nibble_layer_desc d = linear_desc(w);
  d.numeric_mode = mode;
  return d;
}

/// The ISA level a parameter names, capped for the object's life. "amx_tiles" is the AMX level
/// with the tile kernels forced down to M = 1 (no AVX-512 small-M path).
struct IsaSetting {
  explicit IsaSetting(const std::string& param)
      : isa(param == "amx_tiles" ? "amx" : param), cap(isa) {
    if (param == "amx_tiles") setenv("NIBBLE_CPU_AMX_SMALL_M", "0", 1);
  }
  ~IsaSetting() { unsetenv("NIBBLE_CPU_AMX_SMALL_M"); }
  /// Whether this machine has the level.
  bool available() const {
    const std::vector<std::string> here = isa_levels_here();
    return std::find(here.begin(), here.end(), isa) != here.end();
  }
  std::string isa;
  MaxIsa cap;
};

/// Every ISA level crossed with both numeric modes: the parameters of the suites run on each.
inline auto isa_and_mode_values() {
  return ::testing::Combine(::testing::Values("scalar", "avx2", "avx512", "amx", "amx_tiles"),
                            ::testing::Values(int(NIBBLE_MODE_W4A16), int(NIBBLE_MODE_W4A8)));
}

/// The test name of an (ISA level, numeric mode) parameter, e.g. "avx2_w4a16".
inline std::string isa_and_mode_name(
    const ::testing::TestParamInfo<std::tuple<std::string, int>>& info) {
  return std::get<0>(info.param) +
         (std::get<1>(info.param) == NIBBLE_MODE_W4A16 ? "_w4a16" : "_w4a8");
}

}  // namespace nibble::test
