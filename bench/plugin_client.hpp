// The bench's own host: loads a backend plugin through its C ABI (dlopen + nibble_plugin_entry),
// prepares quantized linear layers and runs forward calls, so it needs nothing from libnibble.
#pragma once

#include <nibble/sdk/plugin.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace nibble::bench {

/// A random canonical weight (uniform codes, asymmetric zeros, f16 scales, no bias).
struct CanonicalWeight {
  int64_t K = 0, N = 0, groups = 0;
  int bits = 4, group_size = 128;
  std::vector<uint8_t> q, zeros;
  std::vector<uint16_t> scales;            ///< f16
  std::vector<float> dequantized() const;  ///< W[n][k] as fp32
  nibble_canonical_weight view() const;
};
CanonicalWeight random_weight(int64_t K, int64_t N, int bits, int group_size, uint32_t seed);

class Plugin;

/// One prepared layer of a plugin's kernel.
class PreparedLinear {
 public:
  PreparedLinear(const nibble_kernel* k, nibble_prepared* p) : k_(k), p_(p) {}
  ~PreparedLinear();
  PreparedLinear(const PreparedLinear&) = delete;
  PreparedLinear& operator=(const PreparedLinear&) = delete;
  /// y = layer(x); x, y bf16 row-major. Throws on failure.
  void forward(const uint16_t* x, uint16_t* y, int64_t M, int64_t K, int64_t N, int threads,
               std::vector<uint8_t>& workspace) const;
  size_t bytes() const;

 private:
  const nibble_kernel* k_;
  nibble_prepared* p_;
};

/// One prepared MoE layer of a plugin's kernel.
class PreparedMoe {
 public:
  PreparedMoe(const nibble_kernel* k, nibble_prepared* p) : k_(k), p_(p) {}
  ~PreparedMoe();
  PreparedMoe(const PreparedMoe&) = delete;
  PreparedMoe& operator=(const PreparedMoe&) = delete;
  /// y[M][K] = moe(x[M][K]) for routing ids/weights [M][top_k] (int32, f32); x, y bf16.
  void forward(const uint16_t* x, const int32_t* ids, const float* weights, uint16_t* y, int64_t M,
               int64_t K, int64_t top_k, int threads, std::vector<uint8_t>& workspace) const;
  size_t bytes() const;

 private:
  const nibble_kernel* k_;
  nibble_prepared* p_;
};

/// A MoE layer's shape; every expert shares the same two canonical weights (the bench times
/// memory traffic and arithmetic, not values), yet each is prepared into its own memory.
struct MoeShape {
  int64_t hidden = 0, intermediate = 0;
  int32_t experts = 0, top_k = 0;
};

class Plugin {
 public:
  /// Load libnibble_<name>.so from `dir`; throws with the reason when it cannot.
  Plugin(const std::string& dir, const std::string& name, int threads);
  const nibble_plugin& descriptor() const { return plugin_; }
  std::string probe_detail() const;
  /// The highest-priority kernel of d's op and numeric mode that accepts d, or null (`why`
  /// collects the refusals).
  const nibble_kernel* best_kernel(const nibble_layer_desc& d, std::string* why) const;
  /// The highest-priority kernel of op LINEAR in `mode` that can implement the layer, or null.
  const nibble_kernel* linear_kernel(const CanonicalWeight& w, int mode, std::string* why) const;
  std::unique_ptr<PreparedLinear> prepare(const nibble_kernel* k, const CanonicalWeight& w,
                                          int mode) const;
  /// The highest-priority MoE kernel in `mode` for experts (w13 [2I][K], w2 [K][I]), or null.
  const nibble_kernel* moe_kernel(const MoeShape& s, const CanonicalWeight& w13,
                                  const CanonicalWeight& w2, int mode, std::string* why) const;
  std::unique_ptr<PreparedMoe> prepare_moe(const nibble_kernel* k, const MoeShape& s,
                                           const CanonicalWeight& w13, const CanonicalWeight& w2,
                                           int mode) const;

 private:
  nibble_host host_{};
  nibble_plugin plugin_{};
  int threads_;
};

/// The layer descriptor of `w` for a numeric mode.
nibble_layer_desc linear_desc(const CanonicalWeight& w, int mode);
/// The MoE layer descriptor of experts shaped `s` with weights like w13 and w2.
nibble_layer_desc moe_desc(const MoeShape& s, const CanonicalWeight& w13, const CanonicalWeight& w2,
                           int mode);

}  // namespace nibble::bench
