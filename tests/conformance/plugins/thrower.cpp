// A plugin written against the raw C ABI, without the SDK's exception barrier: can_implement
// lets a C++ exception escape for group size 128, and the entry point starts a thread that
// shutdown never joins. The kit must report all three faults and survive them.
#include <nibble/sdk/plugin.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <thread>

namespace {

void write_reason(nibble_error* e, const char* text) {
  if (e && e->struct_size > offsetof(nibble_error, message) + 1)
    std::snprintf(e->message, e->struct_size - offsetof(nibble_error, message), "%s", text);
}

int32_t can_implement(const nibble_kernel*, const nibble_layer_desc* d, nibble_error* reason) {
  if (d->group_size == 128) throw std::runtime_error("group 128 was not expected");
  write_reason(reason, "this test kernel computes nothing");
  return 0;
}

nibble_status workspace_bytes(const nibble_kernel*, const nibble_prepared*, int64_t, size_t* bytes,
                              nibble_error*) {
  *bytes = 0;
  return NIBBLE_OK;
}

nibble_status prepare(const nibble_kernel*, const nibble_layer_desc*, const nibble_weight_input*,
                      nibble_prepared**, nibble_error* e) {
  write_reason(e, "this test kernel computes nothing");
  return NIBBLE_UNSUPPORTED;
}

nibble_status forward(const nibble_kernel*, const nibble_prepared*, const nibble_forward_args*,
                      const nibble_exec*, nibble_error* e) {
  write_reason(e, "this test kernel computes nothing");
  return NIBBLE_UNSUPPORTED;
}

void release(const nibble_kernel*, nibble_prepared*) {}

nibble_status probe(nibble_probe_result* r) {
  r->available = 1;
  r->struct_size = r->struct_size < sizeof *r ? r->struct_size : uint32_t(sizeof *r);
  return NIBBLE_OK;
}

void shutdown() {}  // forgets the thread the entry point started

const nibble_kernel kKernel = {sizeof(nibble_kernel),
                               "throwing_linear",
                               NIBBLE_OP_LINEAR,
                               1,
                               NIBBLE_MODE_W4A16,
                               1e-3,
                               1e-3,
                               1e-2,
                               &can_implement,
                               &workspace_bytes,
                               &prepare,
                               &forward,
                               &release,
                               nullptr};
const nibble_kernel* const kKernels[] = {&kKernel};

}  // namespace

extern "C" NIBBLE_PLUGIN_EXPORT nibble_status nibble_plugin_entry(const nibble_host*,
                                                                  nibble_plugin* out,
                                                                  nibble_error*) {
  static bool started = false;
  if (!started) {
    started = true;
    std::thread([] {
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
    }).detach();
  }
  nibble_plugin p{};
  p.struct_size = sizeof p;
  p.abi_major = NIBBLE_ABI_MAJOR;
  p.abi_minor = NIBBLE_ABI_MINOR;
  p.name = "thrower";
  p.version = "1.0.0";
  p.vendor = "nibble tests";
  p.description = "exceptions across the ABI and a thread left behind";
  p.probe = &probe;
  p.kernel_count = 1;
  p.kernels = kKernels;
  p.shutdown = &shutdown;
  uint32_t n = out->struct_size < sizeof p ? out->struct_size : uint32_t(sizeof p);
  p.struct_size = n;
  std::memcpy(out, &p, n);
  return NIBBLE_OK;
}
