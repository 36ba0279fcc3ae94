// The bench's client of a backend plugin, over the SDK's host layer (nibble/sdk/host.hpp): loads
// it through its C ABI, picks kernels, prepares random layers and runs bf16 forward calls, so it
// needs nothing from libnibble. A plugin whose kernels run on a device (ABI 1.3) gets its layers
// on device 0 of its type; activations then live in LayerMemory on that device, forward is queued
// on a stream, and Plugin::synchronize waits for it (a timer includes it).
#pragma once

#include <nibble/sdk/plugin.h>
#include <nibble/sdk/host.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace nibble::bench {

/// The bench's weights are the SDK's owned canonical weight.
using sdk::host::CanonicalWeight;
/// A random canonical weight (uniform codes, asymmetric zeros, f16 scales, no bias).
CanonicalWeight random_weight(int64_t K, int64_t N, int bits, int group_size, uint32_t seed);
/// W[n][k] of `w` as fp32.
std::vector<float> dequantized(const CanonicalWeight& w);

class Plugin;

/// One prepared layer of a plugin's kernel, on `device` ({kDLCPU, 0}: host memory).
class PreparedLinear {
 public:
  PreparedLinear(sdk::host::Prepared p, DLDevice device) : p_(std::move(p)), device_(device) {}
  /// y = layer(x); x, y bf16 row-major in the layer's memory (host memory, or LayerMemory on a
  /// device), queued on `stream` on a device. Throws on failure.
  void forward(const uint16_t* x, uint16_t* y, int64_t M, int64_t K, int64_t N, int threads,
               sdk::host::Workspace& workspace, void* stream = nullptr) const;
  /// Bytes the prepared weight holds.
  size_t bytes() const { return p_.bytes(); }

 private:
  sdk::host::Prepared p_;
  DLDevice device_;
};

/// One prepared MoE layer of a plugin's kernel, on `device`.
class PreparedMoe {
 public:
  PreparedMoe(sdk::host::Prepared p, DLDevice device) : p_(std::move(p)), device_(device) {}
  /// y[M][K] = moe(x[M][K]) for routing ids/weights [M][top_k] (int32, f32); x, y bf16; all in
  /// the layer's memory, queued on `stream` on a device.
  void forward(const uint16_t* x, const int32_t* ids, const float* weights, uint16_t* y, int64_t M,
               int64_t K, int64_t top_k, int threads, sdk::host::Workspace& workspace,
               void* stream = nullptr) const;
  /// Bytes the prepared weight holds.
  size_t bytes() const { return p_.bytes(); }

 private:
  sdk::host::Prepared p_;
  DLDevice device_;
};

/// A MoE layer's shape. Every expert shares the same two canonical weights (the bench times
/// memory traffic and arithmetic, not values), yet each is prepared into its own memory.
using sdk::host::MoeShape;

class Plugin {
 public:
  /// Load libnibble_<name>.so from `dir`; throws with the reason when it cannot.
  Plugin(const std::string& dir, const std::string& name, int threads);
  const nibble_plugin& descriptor() const { return plugin_.descriptor(); }
  /// "available: ..." or "unavailable: ..." with the probe's detail: the ISA is the plugin's to
  /// say.
  std::string probe_detail() const;
  /// Where this plugin's layers run: device 0 of its device memory when a kernel runs on a device
  /// it finds, else empty (host memory).
  const sdk::host::Device& device() const { return device_; }
  /// Wait for the work queued on `stream` (nothing to wait for on the CPU).
  void synchronize(void* stream = nullptr) const {
    if (device_) device_.synchronize(stream);
  }
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
  /// The highest-priority dense kernel for a bf16 weight [N][K] (on the plugin's device), or null.
  const nibble_kernel* dense_kernel(int64_t K, int64_t N, std::string* why) const;
  /// A dense layer over the bf16 weight `w` [N][K] (the plugin keeps its own copy).
  std::unique_ptr<PreparedLinear> prepare_dense(const nibble_kernel* k,
                                                const std::vector<uint16_t>& w, int64_t K,
                                                int64_t N) const;

 private:
  sdk::host::LoadedPlugin plugin_;
  sdk::host::Device device_;
};

/// Activations in a plugin's layer memory: the host buffer itself for a CPU plugin, a copy on its
/// device otherwise (uploaded at construction, read back by read_back).
class LayerMemory {
 public:
  /// Memory for `bytes` of `host` data where `plugin`'s layers run.
  LayerMemory(const Plugin& plugin, void* host, size_t bytes);
  /// The pointer to pass to forward.
  template <class T>
  T* as() const {
    return static_cast<T*>(on_device_.get() ? on_device_.get() : host_);
  }
  /// Copy the device copy back into the host buffer and wait (nothing to do on the CPU).
  void read_back() const;

 private:
  const Plugin& plugin_;
  void* host_;
  size_t bytes_;
  sdk::host::DeviceBuffer on_device_;
};

/// The layer descriptor of `w` for a numeric mode, on `device`.
nibble_layer_desc linear_desc(const CanonicalWeight& w, int mode,
                              DLDevice device = DLDevice{kDLCPU, 0});
/// The MoE layer descriptor of experts shaped `s` with weights like w13 and w2, on `device`.
nibble_layer_desc moe_desc(const MoeShape& s, const CanonicalWeight& w13, const CanonicalWeight& w2,
                           int mode, DLDevice device = DLDevice{kDLCPU, 0});

}  // namespace nibble::bench
