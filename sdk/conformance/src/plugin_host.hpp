// The kit's host side of the C ABI: load a plugin with dlopen, call its entry point with a host
// table of this translation unit's ABI minor, and drive kernels (prepare, forward, release) with
// every call guarded so a C++ exception crossing the boundary is caught and reported instead of
// terminating the kit. Compiled as a 1.0 host too (NIBBLE_ABI_MINOR=0) by the version-skew tests.
#pragma once

#include <nibble/sdk/plugin.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "reference.hpp"

namespace nibble::conformance {

/// Size of nibble_kernel / nibble_host / nibble_plugin as ABI 1.0 laid them out: the smallest
/// struct_size a conforming plugin (or host) may stamp.
size_t kernel_size_v10();
size_t host_size_v10();
size_t plugin_size_v10();

/// Exceptions that escaped a plugin call, as "function: what" lines. Each check drains it.
std::vector<std::string>& escaped_exceptions();

/// Run f(); when a C++ exception escapes it, record "<what>: <exception>" in escaped_exceptions()
/// and return false.
template <class F>
bool guarded(const char* what, F&& f) {
  try {
    f();
    return true;
  } catch (const std::exception& e) {
    escaped_exceptions().push_back(std::string(what) + ": " + e.what());
  } catch (...) {
    escaped_exceptions().push_back(std::string(what) + ": a non-std exception");
  }
  return false;
}

/// A caller-owned error buffer with the full capacity.
struct ErrorText {
  nibble_error e{};
  ErrorText() { e.struct_size = sizeof e; }
  nibble_error* get() { return &e; }
  /// The message, bounded by the buffer even when the plugin forgot the terminator.
  std::string text() const;
};

/// Number of threads of this process (entries of /proc/self/task).
int thread_count();

/// The host table the kit hands to plugins (this TU's ABI minor, a thread budget, a quiet log).
const nibble_host* kit_host(int thread_budget);

/// A plugin loaded through dlopen + nibble_plugin_entry. Never unloaded (the ABI forbids it).
struct LoadedPlugin {
  void* handle = nullptr;
  nibble_plugin_entry_fn entry = nullptr;
  nibble_plugin desc{};
  nibble_status entry_status = NIBBLE_OK;
  std::string error;  ///< dlopen/dlsym/entry failure ("" when loaded)
};

/// dlopen `path` (RTLD_NOW | RTLD_LOCAL) and call its entry point.
LoadedPlugin load_plugin(const std::string& path, int thread_budget);

/// Call the entry point again into a fresh descriptor of capacity `capacity` bytes (<= sizeof).
nibble_status call_entry(const LoadedPlugin& p, nibble_plugin* out, uint32_t capacity,
                         std::string* message);

/// Every kernel the plugin lists (empty when the table is missing).
std::vector<const nibble_kernel*> kernels_of(const nibble_plugin& p);

/// Whether the kernel descriptor sets every function pointer the ABI marks required.
std::string missing_kernel_functions(const nibble_kernel* k);

/// Why `k` refuses `d` ("" when it accepts, *accepted set); a refusal without text becomes
/// "(empty reason)", an exception that crossed the ABI a refusal recorded in escaped_exceptions().
std::string why_not(const nibble_kernel* k, const nibble_layer_desc& d, bool* accepted);

/// A prepared weight that releases itself.
class PreparedLayer {
 public:
  PreparedLayer(const nibble_kernel* k, nibble_prepared* p) : k_(k), p_(p) {}
  ~PreparedLayer();
  PreparedLayer(const PreparedLayer&) = delete;
  PreparedLayer& operator=(const PreparedLayer&) = delete;

  /// Run forward with a fresh 64-byte-aligned workspace of workspace_bytes(M); returns the
  /// status and fills *message on failure.
  nibble_status forward(const DLTensor* x, DLTensor* y, const DLTensor* ids,
                        const DLTensor* weights, int threads, std::string* message) const;
  /// Call forward with raw arguments (robustness checks pass broken ones).
  nibble_status forward_raw(const nibble_forward_args* args, int threads, int64_t M,
                            std::string* message) const;
  const nibble_kernel* kernel() const { return k_; }

 private:
  const nibble_kernel* k_;
  nibble_prepared* p_;
};

/// Prepare through the C ABI; on failure returns nullptr with the status and message.
std::unique_ptr<PreparedLayer> prepare(const nibble_kernel* k, const nibble_layer_desc& d,
                                       const nibble_weight_input& in, nibble_status* status,
                                       std::string* message);
/// Prepare a quantized linear weight.
std::unique_ptr<PreparedLayer> prepare_linear(const nibble_kernel* k, const nibble_layer_desc& d,
                                              const TestWeight& w, nibble_status* status,
                                              std::string* message);
/// Prepare a dense weight.
std::unique_ptr<PreparedLayer> prepare_dense(const nibble_kernel* k, const nibble_layer_desc& d,
                                             const TestDense& w, nibble_status* status,
                                             std::string* message);
/// Prepare MoE experts through a nibble_moe_source that hands out `experts` and checks that
/// every get_expert is matched by a put_expert.
std::unique_ptr<PreparedLayer> prepare_moe(const nibble_kernel* k, const nibble_layer_desc& d,
                                           const TestExperts& experts, nibble_status* status,
                                           std::string* message);

/// The MoE descriptor for test experts.
nibble_layer_desc moe_desc(const TestExperts& ex, int top_k, const char* name);

/// A 2-D DLTensor over a byte buffer it owns, optionally with a row stride larger than cols.
struct Tensor2D {
  std::vector<uint8_t> bytes;
  int64_t shape[2] = {0, 0};
  int64_t strides[2] = {0, 1};
  DLTensor t{};
  /// rows × cols of `dtype`, zero-filled; row_stride 0 means packed (strides == NULL).
  Tensor2D(int64_t rows, int64_t cols, DLDataType dtype, int64_t row_stride = 0);
  Tensor2D(const Tensor2D&) = delete;
  Tensor2D& operator=(const Tensor2D&) = delete;
  /// Element (r, c) as double.
  double get(int64_t r, int64_t c) const;
};

/// The short name of an activation dtype bit (NIBBLE_DTYPE_*).
const char* dtype_flag_name(uint32_t flag);
/// The DLPack dtype of an activation dtype bit.
DLDataType dtype_of_flag(uint32_t flag);
/// The kernel's declared bound for an activation dtype bit.
double bound_for(const nibble_kernel* k, uint32_t flag);

}  // namespace nibble::conformance
