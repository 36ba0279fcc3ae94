/* Test plugins written against the raw C ABI, one per RAW_* variant:
 *  RAW_ENTRY_ERROR  the entry point returns an error with a message
 *  RAW_MAJOR2       built for ABI major 2
 *  RAW_NEWER_MINOR  a future minor whose structs are larger than the host's
 *  RAW_NO_ENTRY     exports no entry symbol at all
 *  RAW_NULL_FORWARD a kernel whose required `forward` is NULL
 *  RAW_DUP          a plugin named "dup" (built twice, into two directories)
 *  RAW_CPU13        the current minor, its kernel leaving device_type 0 (a CPU kernel) */
#include <nibble/sdk/plugin.h>

#include <string.h>

#if defined(RAW_NO_ENTRY)
NIBBLE_PLUGIN_EXPORT int some_other_symbol(void) { return 42; }
#else

__attribute__((unused)) static int32_t can_implement(const nibble_kernel* self,
                                                     const nibble_layer_desc* d,
                                                     nibble_error* reason) {
  (void)self;
  (void)d;
  strcpy(reason->message, "this test kernel implements nothing");
  return 0;
}
__attribute__((unused)) static nibble_status workspace_bytes(const nibble_kernel* s,
                                                             const nibble_prepared* p, int64_t M,
                                                             size_t* b, nibble_error* e) {
  (void)s;
  (void)p;
  (void)M;
  (void)e;
  *b = 0;
  return NIBBLE_OK;
}
__attribute__((unused)) static nibble_status prepare(const nibble_kernel* s,
                                                     const nibble_layer_desc* d,
                                                     const nibble_weight_input* w,
                                                     nibble_prepared** out, nibble_error* e) {
  (void)s;
  (void)d;
  (void)w;
  (void)out;
  strcpy(e->message, "unsupported");
  return NIBBLE_UNSUPPORTED;
}
__attribute__((unused)) static nibble_status forward(const nibble_kernel* s,
                                                     const nibble_prepared* p,
                                                     const nibble_forward_args* a,
                                                     const nibble_exec* x, nibble_error* e) {
  (void)s;
  (void)p;
  (void)a;
  (void)x;
  (void)e;
  return NIBBLE_UNSUPPORTED;
}
__attribute__((unused)) static void release(const nibble_kernel* s, nibble_prepared* p) {
  (void)s;
  (void)p;
}
__attribute__((unused)) static nibble_status probe(nibble_probe_result* r) {
  r->available = 1;
  strcpy(r->detail, "raw test plugin");
  return NIBBLE_OK;
}
__attribute__((unused)) static void shutdown(void) {}

/* A kernel descriptor as a newer minor would lay it out: the current fields plus more. */
struct future_kernel {
  nibble_kernel base;
  double future_field;
  void (*future_function)(void);
};
static struct future_kernel kernel = {
    {sizeof(struct future_kernel), "raw", NIBBLE_OP_LINEAR, 5, NIBBLE_MODE_W4A16, 1e-6, 1e-3, 1e-2,
     can_implement, workspace_bytes, prepare,
#if defined(RAW_NULL_FORWARD)
     NULL,
#else
     forward,
#endif
     release, NULL},
    3.5,
    NULL};
__attribute__((unused)) static const nibble_kernel* kernels[] = {&kernel.base};

struct future_plugin {
  nibble_plugin base;
  const char* future_text;
};

NIBBLE_PLUGIN_EXPORT nibble_status nibble_plugin_entry(const nibble_host* host, nibble_plugin* out,
                                                       nibble_error* error) {
  (void)host;
#if defined(RAW_ENTRY_ERROR)
  strcpy(error->message, "license check failed: no license file found");
  (void)out;
  return NIBBLE_UNAVAILABLE;
#else
  (void)error;
  struct future_plugin p;
  memset(&p, 0, sizeof p);
  p.base.abi_major = NIBBLE_ABI_MAJOR;
  p.base.abi_minor = NIBBLE_ABI_MINOR;
#if defined(RAW_MAJOR2)
  p.base.abi_major = 2;
  p.base.abi_minor = 0;
  p.base.name = "major2";
#elif defined(RAW_NEWER_MINOR)
  p.base.abi_minor = NIBBLE_ABI_MINOR_CURRENT + 1;
  p.base.name = "newer";
#elif defined(RAW_NULL_FORWARD)
  p.base.name = "nullfwd";
#elif defined(RAW_DUP)
  p.base.name = "dup";
#elif defined(RAW_CPU13)
  p.base.name = "raw13";
#endif
  p.base.version = "9.9.9";
  p.base.vendor = "nibble tests";
  p.base.description = "raw C ABI test plugin";
  p.base.probe = probe;
  p.base.kernel_count = 1;
  p.base.kernels = kernels;
  p.base.shutdown = shutdown;
  p.future_text = "a field this host does not know";
  uint32_t n = out->struct_size < sizeof p ? out->struct_size : (uint32_t)sizeof p;
  p.base.struct_size = n;
  memcpy(out, &p, n);
  return NIBBLE_OK;
#endif
}
#endif
