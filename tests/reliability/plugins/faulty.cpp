// A plugin whose every entry point can be told to misbehave, written against the raw C ABI (no
// SDK exception barrier), for the host's fault-injection tests. NIBBLE_FAULT names the faults,
// comma-separated, read at every call:
//   entry:fail entry:throw probe:fail probe:throw can_implement:throw prepare:fail prepare:throw
//   prepare:unsupported prepare:null prepare:fail_with_handle workspace:fail workspace:huge
//   forward:fail forward:throw size:small (a plugin descriptor smaller than ABI 1.0's)
// Its kernel otherwise computes a correct quantized linear layer (dequantize, double accumulate).
#include <nibble/sdk/plugin.h>
#include <nibble/sdk/numeric.hpp>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

bool fault(const char* what) {
  const char* env = std::getenv("NIBBLE_FAULT");
  if (!env) return false;
  std::string list = std::string(",") + env + ",";
  return list.find(std::string(",") + what + ",") != std::string::npos;
}

void say(nibble_error* e, const char* text) {
  if (e) std::snprintf(e->message, sizeof e->message, "%s", text);
}

std::atomic<int> g_live{0};  // prepared handles alive, to prove nothing half-built leaks

struct Prepared {
  int64_t K, N;
  std::vector<float> w, bias;
};

int32_t can_implement(const nibble_kernel*, const nibble_layer_desc* d, nibble_error* r) {
  if (fault("can_implement:throw")) throw std::runtime_error("can_implement exploded");
  if (d->op != NIBBLE_OP_LINEAR) {
    say(r, "only quantized linear layers");
    return 0;
  }
  return 1;
}

nibble_status workspace_bytes(const nibble_kernel*, const nibble_prepared*, int64_t, size_t* b,
                              nibble_error* e) {
  if (fault("workspace:fail")) {
    say(e, "injected workspace_bytes failure");
    return NIBBLE_INTERNAL;
  }
  *b = fault("workspace:huge") ? (size_t(1) << 62) : 64;
  return NIBBLE_OK;
}

nibble_status prepare(const nibble_kernel*, const nibble_layer_desc*, const nibble_weight_input* in,
                      nibble_prepared** out, nibble_error* e) {
  if (fault("prepare:throw")) throw std::runtime_error("prepare exploded");
  if (fault("prepare:fail")) {
    say(e, "injected prepare failure");
    return NIBBLE_INTERNAL;
  }
  if (fault("prepare:null")) return NIBBLE_OK;  // success, but no handle
  if (fault("prepare:unsupported")) {
    say(e, "these zero points do not fit my layout");
    return NIBBLE_UNSUPPORTED;
  }
  const nibble_canonical_weight& c = *in->quantized;
  auto* p = new Prepared{c.K, c.N, {}, {}};
  ++g_live;
  p->w.resize(size_t(c.K * c.N));
  p->bias.assign(size_t(c.N), 0.f);
  for (int64_t n = 0; n < c.N; ++n) {
    for (int64_t k = 0; k < c.K; ++k) {
      int64_t g = c.g_idx ? c.g_idx[k] : (c.group_size == -1 ? 0 : k / c.group_size);
      float s = nibble::sdk::load_float(c.scales, c.scales_dtype, size_t(g * c.N + n));
      p->w[size_t(n * c.K + k)] = float(int(c.q[n * c.K + k]) - int(c.zeros[g * c.N + n])) * s;
    }
    if (c.bias) p->bias[size_t(n)] = nibble::sdk::load_float(c.bias, c.bias_dtype, size_t(n));
  }
  *out = reinterpret_cast<nibble_prepared*>(p);
  if (fault("prepare:fail_with_handle")) {
    say(e, "injected failure after allocating the handle");
    return NIBBLE_INTERNAL;
  }
  return NIBBLE_OK;
}

nibble_status forward(const nibble_kernel*, const nibble_prepared* h, const nibble_forward_args* a,
                      const nibble_exec*, nibble_error* e) {
  if (fault("forward:throw")) throw std::runtime_error("forward exploded");
  if (fault("forward:fail")) {
    say(e, "injected forward failure");
    return NIBBLE_INTERNAL;
  }
  auto* p = reinterpret_cast<const Prepared*>(h);
  const DLTensor* x = a->x;
  DLTensor* y = a->y;
  for (int64_t m = 0; m < x->shape[0]; ++m)
    for (int64_t n = 0; n < p->N; ++n) {
      double acc = p->bias[size_t(n)];
      for (int64_t k = 0; k < p->K; ++k)
        acc += double(nibble::sdk::load_float(x->data, x->dtype, size_t(m * p->K + k))) *
               p->w[size_t(n * p->K + k)];
      nibble::sdk::store_float(y->data, y->dtype, size_t(m * p->N + n), float(acc));
    }
  return NIBBLE_OK;
}

void release(const nibble_kernel*, nibble_prepared* h) {
  delete reinterpret_cast<Prepared*>(h);
  --g_live;
}

size_t prepared_bytes(const nibble_kernel*, const nibble_prepared*) {
  return size_t(g_live.load());
}

nibble_status probe(nibble_probe_result* r) {
  if (fault("probe:throw")) throw std::runtime_error("probe exploded");
  if (fault("probe:fail")) return NIBBLE_INTERNAL;
  r->available = 1;
  std::snprintf(r->detail, sizeof r->detail, "fault-injection test plugin");
  return NIBBLE_OK;
}

void shutdown() {}

nibble_kernel g_kernel = {sizeof(nibble_kernel),
                          "linear",
                          NIBBLE_OP_LINEAR,
                          1000,
                          NIBBLE_MODE_W4A16,
                          1e-6,
                          1e-3,
                          1e-2,
                          can_implement,
                          workspace_bytes,
                          prepare,
                          forward,
                          release,
                          prepared_bytes};
const nibble_kernel* g_kernels[] = {&g_kernel};

}  // namespace

extern "C" NIBBLE_PLUGIN_EXPORT nibble_status nibble_plugin_entry(const nibble_host*,
                                                                  nibble_plugin* out,
                                                                  nibble_error* e) {
  if (fault("entry:throw")) throw std::runtime_error("entry exploded");
  if (fault("entry:fail")) {
    say(e, "injected entry failure");
    return NIBBLE_INTERNAL;
  }
  nibble_plugin p{};
  p.struct_size = fault("size:small") ? 12 : uint32_t(std::min<size_t>(out->struct_size, sizeof p));
  p.abi_major = NIBBLE_ABI_MAJOR;
  p.abi_minor = NIBBLE_ABI_MINOR;
  p.name = "faulty";
  p.version = "0.0.1";
  p.vendor = "nibble tests";
  p.description = "fails on demand";
  p.probe = probe;
  p.kernel_count = 1;
  p.kernels = g_kernels;
  p.shutdown = shutdown;
  std::memcpy(out, &p, std::min<size_t>(out->struct_size, sizeof p));
  out->struct_size = p.struct_size;
  return NIBBLE_OK;
}
