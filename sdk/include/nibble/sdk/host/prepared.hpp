// A weight a kernel prepared, as an RAII handle whose deleter is the kernel's `release`, and the
// calls a host makes on it: workspace_bytes, forward (with a 64-byte aligned workspace it owns or
// borrows) and prepared_bytes where the plugin's ABI minor has it. Header-only.
#pragma once

#include <nibble/sdk/plugin.h>
#include <nibble/sdk/host/abi_namespace.hpp>
#include <nibble/sdk/host/error.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

namespace nibble::sdk::host {

/// A 64-byte aligned scratch buffer that grows to the largest size asked of it: a host that keeps
/// one per calling thread allocates nothing once forward calls reach their steady state.
class Workspace {
 public:
  Workspace() = default;
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  ~Workspace() { std::free(data_); }
  /// At least `bytes` of scratch (nullptr for 0); throws CallError (OUT_OF_MEMORY) when it cannot.
  void* get(size_t bytes) {
    if (bytes > size_) {
      std::free(data_);
      data_ = nullptr;
      size_ = 0;
      const size_t rounded = (bytes + 4095) & ~size_t(4095);
      data_ = std::aligned_alloc(64, rounded);
      if (!data_)
        throw CallError(NIBBLE_OUT_OF_MEMORY, "workspace",
                        "cannot allocate a workspace of " + std::to_string(bytes) + " bytes");
      size_ = rounded;
    }
    return bytes ? data_ : nullptr;
  }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
};

inline namespace NIBBLE_SDK_HOST_ABI_NAMESPACE {

/// The most workspace a forward may ask for; more is a plugin bug, refused instead of tried.
constexpr size_t kMaxWorkspaceBytes = size_t(1) << 40;

/// The deleter of a prepared weight: its kernel's release.
struct Release {
  const nibble_kernel* kernel = nullptr;
  void operator()(nibble_prepared* p) const { kernel->release(kernel, p); }
};

/// A prepared weight together with the kernel that prepared it.
class Prepared {
 public:
  Prepared() = default;
  /// Own `handle`, which `kernel` prepared.
  Prepared(const nibble_kernel* kernel, nibble_prepared* handle)
      : handle_(handle, Release{kernel}) {}
  Prepared(Prepared&&) noexcept = default;
  Prepared& operator=(Prepared&&) noexcept = default;
  /// Releases the weight; an exception escaping the plugin's release is dropped here (call
  /// release() first to see it).
  ~Prepared() {
    try {
      release();
    } catch (...) {
    }
  }

  /// Whether a weight is held.
  explicit operator bool() const { return handle_ != nullptr; }
  /// The kernel that prepared the weight.
  const nibble_kernel* kernel() const { return handle_.get_deleter().kernel; }
  /// The plugin's handle.
  const nibble_prepared* get() const { return handle_.get(); }

  /// Release the weight now; throws an escaped CallError when a C++ exception leaves release.
  void release() {
    nibble_prepared* p = handle_.release();
    if (!p) return;
    const Release r = handle_.get_deleter();
    guard("release", [&] { r(p); });
  }
  /// Bytes of workspace a forward with M rows needs; throws CallError.
  size_t workspace_bytes(int64_t M) const {
    const nibble_kernel* k = kernel();
    ErrorBuffer err;
    size_t bytes = 0;
    call_checked("workspace_bytes", err,
                 [&] { return k->workspace_bytes(k, handle_.get(), M, &bytes, err.get()); });
    if (bytes > kMaxWorkspaceBytes)
      throw CallError(NIBBLE_INTERNAL, "workspace_bytes",
                      "asks for a workspace of " + std::to_string(bytes) +
                          " bytes for M = " + std::to_string(M) + "; refusing");
    return bytes;
  }
  /// One forward call with `exec` as given (the host fills workspace and threads); throws
  /// CallError.
  void forward(const nibble_forward_args& args, const nibble_exec& exec) const {
    const nibble_kernel* k = kernel();
    ErrorBuffer err;
    call_checked("forward", err,
                 [&] { return k->forward(k, handle_.get(), &args, &exec, err.get()); });
  }
  /// One forward call of M rows on `threads` threads with scratch from `workspace`, queued on
  /// device stream `stream` (nullptr: the default stream; a host before 1.3 has none, and a CPU
  /// kernel ignores it). A device kernel returns once the work is queued. Throws CallError.
  void forward(const nibble_forward_args& args, int64_t M, int threads, Workspace& workspace,
               void* stream = nullptr) const {
    const size_t bytes = workspace_bytes(M);
    nibble_exec exec{};
    exec.struct_size = sizeof exec;
    exec.workspace = workspace.get(bytes);
    exec.workspace_size = bytes;
    exec.num_threads = threads;
#if NIBBLE_ABI_MINOR >= 3
    exec.stream = stream;
#else
    (void)stream;
#endif
    forward(args, exec);
  }
  /// Bytes the prepared weight holds (0 when the kernel does not say, or its ABI minor predates
  /// prepared_bytes).
  size_t bytes() const {
#if NIBBLE_ABI_MINOR >= 1
    const nibble_kernel* k = kernel();
    // prepared_bytes arrived in ABI 1.1: a 1.0 plugin's kernel struct ends before it.
    if (k->struct_size >= offsetof(nibble_kernel, prepared_bytes) + sizeof(void*) &&
        k->prepared_bytes)
      return guard("prepared_bytes", [&] { return k->prepared_bytes(k, handle_.get()); });
#endif
    return 0;
  }

 private:
  std::unique_ptr<nibble_prepared, Release> handle_{nullptr, Release{}};
};

/// Prepare `weight` for `desc` with kernel `k`; throws CallError with the plugin's status and
/// message (also when it answers OK without a handle). A handle returned with an error is released.
inline Prepared prepare(const nibble_kernel* k, const nibble_layer_desc& desc,
                        const nibble_weight_input& weight) {
  ErrorBuffer err;
  nibble_prepared* p = nullptr;
  nibble_status s = NIBBLE_INTERNAL;
  try {
    s = guard("prepare", [&] { return k->prepare(k, &desc, &weight, &p, err.get()); });
  } catch (...) {
    if (p) {
      Prepared orphan(k, p);  // a handle left behind by a throwing prepare is released
    }
    throw;
  }
  Prepared out(k, p);
  check(s, "prepare", err);
  if (!out) throw CallError(NIBBLE_INTERNAL, "prepare", "prepare returned NIBBLE_OK but no handle");
  return out;
}

/// The forward arguments of one call (MoE adds the routing ids and weights).
inline nibble_forward_args forward_args(const DLTensor& x, DLTensor& y,
                                        const DLTensor* topk_ids = nullptr,
                                        const DLTensor* topk_weights = nullptr) {
  nibble_forward_args a{};
  a.struct_size = sizeof a;
  a.x = &x;
  a.y = &y;
  a.topk_ids = topk_ids;
  a.topk_weights = topk_weights;
  return a;
}

/// A weight input that lends a quantized weight (the other members NULL).
inline nibble_weight_input quantized_input(const nibble_canonical_weight& w) {
  nibble_weight_input in{};
  in.struct_size = sizeof in;
  in.quantized = &w;
  return in;
}
/// A weight input that lends a dense weight.
inline nibble_weight_input dense_input(const nibble_dense_weight& w) {
  nibble_weight_input in{};
  in.struct_size = sizeof in;
  in.dense = &w;
  return in;
}
/// A weight input that lends an MoE expert source.
inline nibble_weight_input experts_input(const nibble_moe_source& s) {
  nibble_weight_input in{};
  in.struct_size = sizeof in;
  in.experts = &s;
  return in;
}

}  // namespace NIBBLE_SDK_HOST_ABI_NAMESPACE
}  // namespace nibble::sdk::host
