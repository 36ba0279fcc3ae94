// The kit's host side of the C ABI, over the SDK's host layer (nibble/sdk/host.hpp): statuses
// kept instead of thrown, since the kit reports them, and every C++ exception that crosses the
// boundary recorded for the check that provoked it. A device kernel (ABI 1.3) is asked for layers
// on device 0 of its type, and every forward call's tensors are staged there through the plugin's
// device memory and y read back, so every check runs unchanged on device tensors. Compiled as a
// 1.0 host too (NIBBLE_ABI_MINOR=0) by the version-skew tests, where every kernel is a CPU kernel.
#pragma once

#include <nibble/sdk/plugin.h>
#include <nibble/conformance/reference.hpp>
#include <nibble/sdk/host.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace nibble::conformance {

/// Size of nibble_kernel / nibble_host / nibble_plugin as ABI 1.0 laid them out: the smallest
/// struct_size a conforming plugin (or host) may stamp.
size_t kernel_size_v10();
size_t host_size_v10();
size_t plugin_size_v10();

/// Exceptions that escaped a plugin call, as "function: what" lines. Each check drains it.
std::vector<std::string>& escaped_exceptions();

/// Record `e` in escaped_exceptions() when it is a C++ exception that crossed the C ABI.
void note_escape(const sdk::host::CallError& e);

/// Run f(), one raw call into a plugin; when a C++ exception escapes it, record it in
/// escaped_exceptions() and return false.
template <class F>
bool guarded(const char* what, F&& f) {
  try {
    sdk::host::guard(what, f);
    return true;
  } catch (const sdk::host::CallError& e) {
    note_escape(e);
  }
  return false;
}

/// Run f() (host-layer calls that throw sdk::host::CallError): its status, with the plugin's
/// message in *message; an escaped exception is recorded as well.
template <class F>
nibble_status status_of(F&& f, std::string* message) {
  try {
    f();
    return NIBBLE_OK;
  } catch (const sdk::host::CallError& e) {
    note_escape(e);
    if (message) *message = e.message();
    return e.status();
  }
}

using sdk::host::ErrorBuffer;

/// Number of threads of this process (entries of /proc/self/task).
int thread_count();

/// The plugin under test, loaded through dlopen + nibble_plugin_entry with a failure kept as text
/// rather than thrown. Never unloaded (the ABI forbids it).
struct PluginUnderTest {
  nibble_plugin_entry_fn entry = nullptr;
  nibble_plugin desc{};
  nibble_status entry_status = NIBBLE_OK;
  std::string error;  ///< dlopen/dlsym/entry failure ("" when loaded)
};

/// dlopen `path` (RTLD_NOW | RTLD_LOCAL) and call its entry point.
PluginUnderTest load_plugin(const std::string& path, int thread_budget);

/// The device plugin `p`'s device kernels run on (device 0 of its device memory), empty for a CPU
/// plugin; the kit stages their tensors there.
sdk::host::Device plugin_device(const nibble_plugin& p);

/// Stage device kernels' tensors through the device memory of load `p` from now on (the kit
/// stages through the first load's; a second load of the same plugin has its own).
void stage_on_device_of(const nibble_plugin& p);

/// Where kernel `k` of the plugin under test takes its tensors: empty (host memory) for a CPU
/// kernel, else the plugin's device 0.
sdk::host::Device tensor_device(const nibble_kernel* k);

/// `d` asked on the device kernel `k` runs on (device 0 of its type); unchanged for a CPU kernel.
nibble_layer_desc on_kernel_device(const nibble_kernel* k, nibble_layer_desc d);

/// Call the entry point again into a fresh descriptor of capacity `capacity` bytes (<= sizeof).
nibble_status call_entry(const PluginUnderTest& p, nibble_plugin* out, uint32_t capacity,
                         std::string* message);

using sdk::host::kernels_of;

/// Whether the kernel descriptor sets every function pointer the ABI marks required.
std::string missing_kernel_functions(const nibble_kernel* k);

/// Why `k` refuses `d` ("" when it accepts, *accepted set); a refusal without text becomes
/// "(empty reason)", an exception that crossed the ABI a refusal recorded in escaped_exceptions().
std::string why_not(const nibble_kernel* k, const nibble_layer_desc& d, bool* accepted);

/// A prepared weight that releases itself (an exception escaping release is recorded).
class PreparedLayer {
 public:
  explicit PreparedLayer(sdk::host::Prepared p) : p_(std::move(p)) {}
  ~PreparedLayer();
  PreparedLayer(const PreparedLayer&) = delete;
  PreparedLayer& operator=(const PreparedLayer&) = delete;

  /// Run forward with a fresh 64-byte-aligned workspace of workspace_bytes(M) (on a device
  /// kernel: with the tensors staged on its device and y read back); returns the status and
  /// fills *message on failure.
  nibble_status forward(const DLTensor* x, DLTensor* y, const DLTensor* ids,
                        const DLTensor* weights, int threads, std::string* message) const;
  /// Call forward with raw arguments (robustness checks pass broken ones), staged on the kernel's
  /// device as forward() does.
  nibble_status forward_raw(const nibble_forward_args* args, int threads, int64_t M,
                            std::string* message) const;
  /// Call forward with `args` exactly as given, on whatever device they say they are.
  nibble_status forward_as_given(const nibble_forward_args* args, int threads, int64_t M,
                                 std::string* message) const;
  const nibble_kernel* kernel() const { return p_.kernel(); }

 private:
  sdk::host::Prepared p_;
};

/// Prepare through the C ABI; on failure returns nullptr with the status and message.
std::unique_ptr<PreparedLayer> prepare(const nibble_kernel* k, const nibble_layer_desc& d,
                                       const nibble_weight_input& in, nibble_status* status,
                                       std::string* message);
/// Prepare a quantized linear weight.
std::unique_ptr<PreparedLayer> prepare_linear(const nibble_kernel* k, const nibble_layer_desc& d,
                                              const CanonicalWeight& w, nibble_status* status,
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

/// The short name of an activation dtype bit (NIBBLE_DTYPE_*).
const char* dtype_flag_name(uint32_t flag);
/// The DLPack dtype of an activation dtype bit.
DLDataType dtype_of_flag(uint32_t flag);
/// The kernel's declared bound for an activation dtype bit.
double bound_for(const nibble_kernel* k, uint32_t flag);

}  // namespace nibble::conformance
