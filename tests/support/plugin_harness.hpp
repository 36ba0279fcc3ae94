// Test support: drive a plugin through its C ABI alone (dlopen, entry, prepare, forward), the way
// a host does, without libnibble. Plugin tests use it to check kernels in isolation.
#pragma once

#include <nibble/sdk/plugin.h>
#include <nibble/sdk/numeric.hpp>

#include <dlfcn.h>

#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "reference.hpp"

namespace nibble::test {

/// The build tree's plugin directory (lib/nibble/plugins).
inline std::string plugin_build_dir() {
  const char* env = std::getenv("NIBBLE_BUILD_DIR");
  return (env ? std::string(env) : std::string(NIBBLE_BUILD_DIR)) + "/lib/nibble/plugins";
}

/// A 2-D DLTensor over a byte buffer it owns.
struct Tensor2D {
  std::vector<uint8_t> bytes;
  int64_t shape[2] = {0, 0};
  DLTensor t{};
  /// A rows × cols tensor of `dtype`, zero-filled.
  Tensor2D(int64_t rows, int64_t cols, DLDataType dtype) {
    bytes.resize(size_t(rows * cols) * sdk::dtype_bytes(dtype) + 1);
    shape[0] = rows;
    shape[1] = cols;
    t.data = bytes.data();
    t.device = DLDevice{kDLCPU, 0};
    t.ndim = 2;
    t.dtype = dtype;
    t.shape = shape;
    t.strides = nullptr;
    t.byte_offset = 0;
  }
  Tensor2D(const Tensor2D&) = delete;
  Tensor2D& operator=(const Tensor2D&) = delete;
};

/// A plugin loaded straight through dlopen, with its descriptor.
class HarnessPlugin {
 public:
  /// Load libnibble_<name>.so from the build tree's plugin directory (or `path` if given).
  explicit HarnessPlugin(const std::string& name, std::string path = "") {
    if (path.empty()) path = plugin_build_dir() + "/libnibble_" + name + ".so";
    handle_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle_) throw std::runtime_error("dlopen " + path + ": " + dlerror());
    auto entry =
        reinterpret_cast<nibble_plugin_entry_fn>(dlsym(handle_, NIBBLE_PLUGIN_ENTRY_SYMBOL));
    if (!entry) throw std::runtime_error(path + ": no nibble_plugin_entry");
    host_.struct_size = sizeof host_;
    host_.abi_major = NIBBLE_ABI_MAJOR;
    host_.abi_minor = NIBBLE_ABI_MINOR;
    host_.host_version = "test-harness";
    host_.log = [](void*, int32_t, const char*, const char*) {};
#if NIBBLE_ABI_MINOR >= 1
    host_.thread_budget = [](void*) -> int32_t { return 2; };
#endif
    plugin_.struct_size = sizeof plugin_;
    plugin_.abi_major = NIBBLE_ABI_MAJOR;
    plugin_.abi_minor = NIBBLE_ABI_MINOR;
    nibble_error err{};
    err.struct_size = sizeof err;
    if (entry(&host_, &plugin_, &err) != NIBBLE_OK)
      throw std::runtime_error(path + ": entry failed: " + err.message);
  }
  // Plugins are never unloaded (docs/ARCHITECTURE.md#loading): the handle is deliberately kept.
  HarnessPlugin(const HarnessPlugin&) = delete;

  /// The descriptor the plugin filled.
  const nibble_plugin& plugin() const { return plugin_; }
  /// The kernel called `name`, or nullptr.
  const nibble_kernel* kernel(const std::string& name) const {
    for (uint32_t i = 0; i < plugin_.kernel_count; ++i)
      if (name == plugin_.kernels[i]->name) return plugin_.kernels[i];
    return nullptr;
  }
  /// Every kernel of an op.
  std::vector<const nibble_kernel*> kernels(nibble_op op) const {
    std::vector<const nibble_kernel*> out;
    for (uint32_t i = 0; i < plugin_.kernel_count; ++i)
      if (plugin_.kernels[i]->op == op) out.push_back(plugin_.kernels[i]);
    return out;
  }

 private:
  void* handle_ = nullptr;
  nibble_host host_{};
  nibble_plugin plugin_{};
};

/// An error text buffer.
struct ErrorText {
  nibble_error e{};
  ErrorText() { e.struct_size = sizeof e; }
  nibble_error* get() { return &e; }
  std::string text() const { return e.message; }
};

/// Why `k` cannot implement `d` ("" when it can).
inline std::string why_not(const nibble_kernel* k, const nibble_layer_desc& d) {
  ErrorText err;
  return k->can_implement(k, &d, err.get()) ? std::string() : err.text();
}

/// A prepared weight that releases itself.
class PreparedLayer {
 public:
  PreparedLayer(const nibble_kernel* k, nibble_prepared* p) : k_(k), p_(p) {}
  ~PreparedLayer() {
    if (p_) k_->release(k_, p_);
  }
  PreparedLayer(const PreparedLayer&) = delete;
  PreparedLayer& operator=(const PreparedLayer&) = delete;

  /// Run forward; returns the status and fills *message on failure.
  nibble_status forward(const DLTensor* x, DLTensor* y, const DLTensor* ids = nullptr,
                        const DLTensor* weights = nullptr, int threads = 2,
                        std::string* message = nullptr) const {
    ErrorText err;
    size_t ws = 0;
    if (k_->workspace_bytes(k_, p_, x->shape[0], &ws, err.get()) != NIBBLE_OK) {
      if (message) *message = err.text();
      return NIBBLE_INTERNAL;
    }
    std::vector<uint8_t> buffer(ws + 64);
    nibble_exec exec{};
    exec.struct_size = sizeof exec;
    auto addr = reinterpret_cast<uintptr_t>(buffer.data());
    exec.workspace = reinterpret_cast<void*>((addr + 63) & ~uintptr_t(63));
    exec.workspace_size = ws;
    exec.num_threads = threads;
    nibble_forward_args args{};
    args.struct_size = sizeof args;
    args.x = x;
    args.y = y;
    args.topk_ids = ids;
    args.topk_weights = weights;
    nibble_status s = k_->forward(k_, p_, &args, &exec, err.get());
    if (s != NIBBLE_OK && message) *message = err.text();
    return s;
  }
  /// Bytes the prepared weight holds (0 when the kernel does not say).
  size_t bytes() const {
#if NIBBLE_ABI_MINOR >= 1
    return k_->prepared_bytes ? k_->prepared_bytes(k_, p_) : 0;
#else
    return 0;
#endif
  }

 private:
  const nibble_kernel* k_;
  nibble_prepared* p_;
};

/// Prepare a quantized linear weight; throws with the plugin's message on failure.
inline std::unique_ptr<PreparedLayer> prepare_linear(const nibble_kernel* k,
                                                     const nibble_layer_desc& d,
                                                     const TestWeight& w) {
  nibble_canonical_weight cw = w.view();
  nibble_weight_input in{};
  in.struct_size = sizeof in;
  in.quantized = &cw;
  nibble_prepared* p = nullptr;
  ErrorText err;
  if (k->prepare(k, &d, &in, &p, err.get()) != NIBBLE_OK)
    throw std::runtime_error(std::string(k->name) + " prepare: " + err.text());
  return std::make_unique<PreparedLayer>(k, p);
}

/// The MoE descriptor for test experts.
inline nibble_layer_desc moe_desc(const TestExperts& ex, int top_k, const char* name = "test.moe") {
  nibble_layer_desc d = ex.w13[0].linear_desc(name);
  d.op = NIBBLE_OP_MOE;
  d.K = ex.K;
  d.N = ex.I;
  d.has_bias = 0;
  d.num_experts = int32_t(ex.w13.size());
  d.top_k = top_k;
  d.activation = NIBBLE_ACT_SILU;
  d.w2_group_size = ex.w2[0].group_size;
  d.w2_has_g_idx = ex.w2[0].g_idx.empty() ? 0 : 1;
  d.w2_symmetric = ex.w2[0].is_symmetric() ? 1 : 0;
  d.symmetric = ex.w13[0].is_symmetric() ? 1 : 0;
  d.has_g_idx = ex.w13[0].g_idx.empty() ? 0 : 1;
#if NIBBLE_ABI_MINOR >= 1
  d.max_zero = d.w2_max_zero = 0;
  for (size_t e = 0; e < ex.w13.size(); ++e)
    for (const auto* w : {&ex.w13[e], &ex.w2[e]}) {
      int z = w->zeros.empty() ? 0 : *std::max_element(w->zeros.begin(), w->zeros.end());
      int32_t& slot = w == &ex.w13[e] ? d.max_zero : d.w2_max_zero;
      slot = std::max<int32_t>(slot, z);
    }
#endif
  return d;
}

/// Prepare MoE experts through a nibble_moe_source over `ex`.
inline std::unique_ptr<PreparedLayer> prepare_moe(const nibble_kernel* k,
                                                  const nibble_layer_desc& d,
                                                  const TestExperts& ex) {
  nibble_moe_source src{};
  src.struct_size = sizeof src;
  src.num_experts = int32_t(ex.w13.size());
  src.ctx = const_cast<TestExperts*>(&ex);
  src.get_expert = [](void* ctx, int32_t e, nibble_canonical_weight* a, nibble_canonical_weight* b,
                      nibble_error*) -> nibble_status {
    auto* x = static_cast<TestExperts*>(ctx);
    *a = x->w13[size_t(e)].view();
    *b = x->w2[size_t(e)].view();
    return NIBBLE_OK;
  };
  src.put_expert = [](void*, int32_t) {};
  nibble_weight_input in{};
  in.struct_size = sizeof in;
  in.experts = &src;
  nibble_prepared* p = nullptr;
  ErrorText err;
  if (k->prepare(k, &d, &in, &p, err.get()) != NIBBLE_OK)
    throw std::runtime_error(std::string(k->name) + " prepare: " + err.text());
  return std::make_unique<PreparedLayer>(k, p);
}

}  // namespace nibble::test
