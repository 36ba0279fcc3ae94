// The host API: a Runtime loads the plugins once, then turns checkpoint layers into prepared
// layer objects — decode (scheme) → select (registry) → prepare (plugin kernel) — whose forward
// runs on the chosen backend.
//
//   nibble::Runtime rt({.backend = "cpu_amx"});
//   auto ckpt = nibble::Checkpoint::open("model_dir");
//   auto q = rt.linear(ckpt, "model.layers.0.self_attn.q_proj");
//   q.forward(x, y);                        // DLTensors: x [M,K] -> y [M,N], f32/bf16/f16
//   auto moe = rt.moe(ckpt, "model.layers.0.mlp", {.top_k = 2});
//   moe.forward(x, y);                      // router + experts: x [M,K] -> y [M,K]
//
// Devices: with RuntimeOptions::device (or a device backend named alone), layers run on a device
// and take tensors there (layer.device() says where; layer.device_memory() allocates and copies
// through the backend, so a program needs no device library). A device forward is queued on the
// stream it is given and returns before the result is ready: synchronize that stream before
// reading y, and before the last copy of a layer goes (its weight is released then).
#pragma once

#include <nibble/checkpoint.hpp>
#include <nibble/export.hpp>
#include <nibble/options.hpp>
#include <nibble/registry.hpp>
#include <nibble/sdk/host/device.hpp>

#include <dlpack/dlpack.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace nibble {

/// Where one part of a layer runs, and which candidates were passed over on the way.
struct Placement {
  std::string layer;                      ///< the checkpoint prefix
  std::string part;                       ///< "linear", "dense", "router" or "experts"
  std::string backend;                    ///< the backend that runs it
  std::string kernel;                     ///< the kernel's name
  std::vector<std::string> passed_over;   ///< "backend/kernel: reason" of earlier candidates
  std::vector<std::string> alternatives;  ///< every loaded kernel of this op and its verdict
};

/// How a MoE block routes tokens.
struct MoeOptions {
  /// Experts per token; 0 takes the checkpoint's num_experts_per_tok.
  int top_k = 0;
  /// Renormalise the chosen experts' weights to sum to 1; unset takes the checkpoint's
  /// norm_topk_prob.
  std::optional<bool> renormalize;
  /// Router scores: "softmax" (default) or "sigmoid".
  std::string scoring;
};

class PreparedKernel;

/// A prepared linear layer (quantized or dense). Copies share the prepared weight; forward may
/// run concurrently from several threads.
class NIBBLE_API LinearLayer {
 public:
  /// y[M,N] = x[M,K] · Wᵀ + b; x and y are 2-D tensors of one dtype (f32, bf16 or f16) on
  /// device() (host memory for a CPU layer). M = 0 does nothing. Throws nibble::Error naming the
  /// layer on a bad tensor. On a device: forward(x, y, nullptr), the default stream.
  void forward(const DLTensor& x, DLTensor& y) const;
  /// The same, queued on device stream `stream` (CUDA: a cudaStream_t; nullptr: the default
  /// stream). On a device it returns once queued: y is ready when the stream is synchronized
  /// (device_memory().synchronize(stream)). A CPU layer ignores the stream and returns when done.
  void forward(const DLTensor& x, DLTensor& y, void* stream) const;
  /// Where x and y must live: {kDLCPU, 0} (any host memory) or the layer's device.
  DLDevice device() const;
  /// The memory calls of the backend that runs the layer, for device(): allocate, copy and
  /// synchronize without a device library. Empty (false) for a CPU layer. Valid while this layer
  /// (a copy of it) or its Runtime lives: they keep the backend's load.
  sdk::host::Device device_memory() const;
  /// K.
  int64_t in_features() const;
  /// N.
  int64_t out_features() const;
  /// Where it runs.
  const Placement& placement() const;
  /// Bytes the backend holds for the prepared weight (0 when the plugin does not say).
  size_t prepared_bytes() const;

 private:
  friend class Runtime;
  std::shared_ptr<const PreparedKernel> op_;
};

/// A prepared MoE block: its router (a dense layer) and its experts.
class NIBBLE_API MoeLayer {
 public:
  /// Route and run: y[M,K] = Σ_j w[m,j] · expert_{ids[m,j]}(x[m]); x and y on device().
  void forward(const DLTensor& x, DLTensor& y) const;
  /// The same on device stream `stream` (nullptr: the default stream). Routing happens on the
  /// host, so on a device this waits for the router's logits, and it returns once the experts
  /// have finished (their routing buffers are freed then).
  void forward(const DLTensor& x, DLTensor& y, void* stream) const;
  /// Run the experts with routing given by the caller (as engines pass it): topk_ids [M,top_k]
  /// int32/int64 (−1: no expert), topk_weights [M,top_k] f32/f16/bf16, all on device(). On a
  /// device a kernel need not report an id outside [-1, num_experts) (it cannot read it back in
  /// time); keep them in range.
  void forward_routed(const DLTensor& x, const DLTensor& topk_ids, const DLTensor& topk_weights,
                      DLTensor& y) const;
  /// The same, queued on device stream `stream`; on a device it returns once queued.
  void forward_routed(const DLTensor& x, const DLTensor& topk_ids, const DLTensor& topk_weights,
                      DLTensor& y, void* stream) const;
  /// The router alone: top_k expert ids and weights (f32, host memory) for each row of x (on
  /// device()). On a device the router's logits are computed in x's dtype (f32 on the CPU).
  void route(const DLTensor& x, std::vector<int32_t>& topk_ids,
             std::vector<float>& topk_weights) const;
  /// Where x, y and routing tensors must live: {kDLCPU, 0} (host memory) or the block's device.
  DLDevice device() const;
  /// The memory calls of the backend that runs the experts, for device(); empty on the CPU.
  /// Valid while this block or its Runtime lives.
  sdk::host::Device device_memory() const;
  /// Experts per token.
  int top_k() const { return top_k_; }
  /// Number of experts.
  int num_experts() const { return num_experts_; }
  /// Hidden size K.
  int64_t hidden() const { return hidden_; }
  /// Where the router and the experts run.
  std::vector<Placement> placements() const;
  /// Bytes the backend holds for the prepared experts.
  size_t prepared_bytes() const;

 private:
  friend class Runtime;
  // route() with the router's work queued on `stream` (a device router's logits are waited for).
  void route_on(const DLTensor& x, std::vector<int32_t>& topk_ids, std::vector<float>& topk_weights,
                void* stream) const;
  std::shared_ptr<const PreparedKernel> router_, experts_;
  int top_k_ = 0, num_experts_ = 0;
  int64_t hidden_ = 0;
  bool renormalize_ = false;
  bool sigmoid_ = false;
};

/// Loads plugins once and builds layers.
class NIBBLE_API Runtime {
 public:
  /// Load the plugins named by `options` (see RuntimeOptions). Bad plugins are reported in
  /// registry().reports(), never thrown.
  explicit Runtime(RuntimeOptions options = {});
  /// The loaded plugins.
  const Registry& registry() const { return *registry_; }
  /// The options in force.
  const RuntimeOptions& options() const { return options_; }
  /// Where this runtime's layers run: options().device parsed, or when that is empty the device
  /// the backend implies (see RuntimeOptions::device).
  DLDevice device() const { return device_; }
  /// Build the linear layer `prefix` (quantized or dense) of `ckpt`. The canonical weight is
  /// freed once the backend has prepared it.
  LinearLayer linear(const Checkpoint& ckpt, const std::string& prefix) const;
  /// Build the MoE block `prefix` of `ckpt` (router included); experts are decoded one at a time.
  MoeLayer moe(const Checkpoint& ckpt, const std::string& prefix,
               const MoeOptions& options = {}) const;
  /// A dense layer from a weight the caller holds ([N][K] f32/f16/bf16, optional bias), for
  /// routers an engine keeps itself and for dense baselines. The weight is copied by the plugin.
  LinearLayer dense(const std::string& name, const nibble_dense_weight& weight) const;
  /// The layer descriptor a quantized weight gets under this runtime's mode.
  nibble_layer_desc describe(const CanonicalWeight& w, const char* name) const;
  /// The ABI's numeric mode (nibble_numeric_mode) quantized layers get under this runtime's mode.
  int32_t numeric_mode() const;
  /// The layer descriptor the experts of MoE block `info` get under this runtime's mode with
  /// `top_k` slots, from the checkpoint's layer facts alone (no expert is decoded).
  nibble_layer_desc describe_experts(const MoeInfo& info, int top_k, const char* name) const;

 private:
  RuntimeOptions options_;
  std::shared_ptr<const Registry> registry_;
  DLDevice device_{kDLCPU, 0};
};

}  // namespace nibble
