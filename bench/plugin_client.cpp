#include "plugin_client.hpp"

#include <nibble/sdk/numeric.hpp>

#include <dlfcn.h>

#include <random>
#include <stdexcept>

namespace nibble::bench {

CanonicalWeight random_weight(int64_t K, int64_t N, int bits, int group_size, uint32_t seed) {
  CanonicalWeight w;
  w.K = K;
  w.N = N;
  w.bits = bits;
  w.group_size = group_size;
  const int64_t gs = group_size > 0 ? group_size : K;
  w.groups = (K + gs - 1) / gs;
  std::mt19937 rng(seed);
  const uint32_t maxq = (1u << bits) - 1;
  w.q.resize(size_t(K * N));
  for (size_t i = 0; i < w.q.size(); i += 4) {
    uint32_t r = rng();
    for (size_t j = 0; j < 4 && i + j < w.q.size(); ++j)
      w.q[i + j] = uint8_t((r >> (8 * j)) & maxq);
  }
  w.zeros.resize(size_t(w.groups * N));
  for (auto& z : w.zeros) z = uint8_t(rng() & maxq);
  w.scales.resize(size_t(w.groups * N));
  std::uniform_real_distribution<float> mag(0.5f, 1.5f);
  for (auto& s : w.scales) s = sdk::f32_to_f16(mag(rng) / (float(maxq) * 64.f));
  return w;
}

std::vector<float> CanonicalWeight::dequantized() const {
  std::vector<float> d(size_t(K * N));
  const int64_t gs = group_size > 0 ? group_size : K;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) {
      const size_t gi = size_t((k / gs) * N + n);
      d[size_t(n * K + k)] =
          float(int(q[size_t(n * K + k)]) - int(zeros[gi])) * sdk::f16_to_f32(scales[gi]);
    }
  return d;
}

nibble_canonical_weight CanonicalWeight::view() const {
  nibble_canonical_weight c{};
  c.struct_size = sizeof c;
  c.bits = bits;
  c.group_size = group_size;
  c.K = K;
  c.N = N;
  c.num_groups = groups;
  c.q = q.data();
  c.scales = scales.data();
  c.scales_dtype = sdk::dtype_f16();
  c.zeros = zeros.data();
  return c;
}

nibble_layer_desc linear_desc(const CanonicalWeight& w, int mode) {
  nibble_layer_desc d{};
  d.struct_size = sizeof d;
  d.op = NIBBLE_OP_LINEAR;
  d.name = "bench.linear";
  d.K = w.K;
  d.N = w.N;
  d.bits = w.bits;
  d.group_size = w.group_size;
  d.weight_dtype = sdk::dtype_f16();
  d.numeric_mode = mode;
  d.act_dtypes = NIBBLE_DTYPE_BF16;
  return d;
}

nibble_layer_desc moe_desc(const MoeShape& s, const CanonicalWeight& w13, const CanonicalWeight& w2,
                           int mode) {
  nibble_layer_desc d = linear_desc(w13, mode);
  d.op = NIBBLE_OP_MOE;
  d.name = "bench.moe";
  d.K = s.hidden;
  d.N = s.intermediate;
  d.num_experts = s.experts;
  d.top_k = s.top_k;
  d.activation = NIBBLE_ACT_SILU;
  d.w2_group_size = w2.group_size;
  d.max_zero = (1 << w13.bits) - 1;
  d.w2_max_zero = (1 << w2.bits) - 1;
  return d;
}

namespace {
struct Err {
  nibble_error e{};
  Err() { e.struct_size = sizeof e; }
};
int32_t budget_of(void* ctx) { return *static_cast<int*>(ctx); }

nibble_prepared* prepare_or_throw(const nibble_kernel* k, const nibble_layer_desc& d,
                                  const nibble_weight_input& in) {
  nibble_prepared* p = nullptr;
  Err err;
  if (k->prepare(k, &d, &in, &p, &err.e) != NIBBLE_OK)
    throw std::runtime_error(std::string(k->name) + " prepare: " + err.e.message);
  return p;
}

// A 2-D row-major CPU tensor over caller-owned data and shape.
DLTensor tensor2d(const void* data, DLDataType dtype, int64_t* shape) {
  DLTensor t{};
  t.data = const_cast<void*>(data);
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = 2;
  t.dtype = dtype;
  t.shape = shape;
  return t;
}

// One forward call with a 64-byte aligned workspace grown to what the kernel asks for M rows.
void forward_or_throw(const nibble_kernel* k, nibble_prepared* p, const nibble_forward_args& a,
                      int64_t M, int threads, std::vector<uint8_t>& workspace) {
  Err err;
  size_t ws = 0;
  if (k->workspace_bytes(k, p, M, &ws, &err.e) != NIBBLE_OK)
    throw std::runtime_error(std::string("workspace_bytes: ") + err.e.message);
  if (workspace.size() < ws + 64) workspace.resize(ws + 64);
  nibble_exec e{};
  e.struct_size = sizeof e;
  e.workspace = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(workspace.data()) + 63) &
                                        ~uintptr_t(63));
  e.workspace_size = ws;
  e.num_threads = threads;
  if (k->forward(k, p, &a, &e, &err.e) != NIBBLE_OK)
    throw std::runtime_error(std::string(k->name) + " forward: " + err.e.message);
}
}  // namespace

Plugin::Plugin(const std::string& dir, const std::string& name, int threads) : threads_(threads) {
  const std::string path = dir + "/libnibble_" + name + ".so";
  // Never closed (docs/ARCHITECTURE.md#loading).
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) throw std::runtime_error("cannot load " + path + ": " + dlerror());
  auto entry = reinterpret_cast<nibble_plugin_entry_fn>(dlsym(h, NIBBLE_PLUGIN_ENTRY_SYMBOL));
  if (!entry) throw std::runtime_error(path + ": no " NIBBLE_PLUGIN_ENTRY_SYMBOL);
  host_.struct_size = sizeof host_;
  host_.abi_major = NIBBLE_ABI_MAJOR;
  host_.abi_minor = NIBBLE_ABI_MINOR;
  host_.host_version = "nibble-bench";
  host_.ctx = &threads_;
  host_.log = [](void*, int32_t, const char*, const char*) {};
  host_.thread_budget = &budget_of;
  plugin_.struct_size = sizeof plugin_;
  plugin_.abi_major = NIBBLE_ABI_MAJOR;
  plugin_.abi_minor = NIBBLE_ABI_MINOR;
  Err err;
  if (entry(&host_, &plugin_, &err.e) != NIBBLE_OK)
    throw std::runtime_error(path + ": entry failed: " + err.e.message);
}

std::string Plugin::probe_detail() const {
  nibble_probe_result r{};
  r.struct_size = sizeof r;
  if (plugin_.probe(&r) != NIBBLE_OK) return "probe failed";
  return std::string(r.available ? "available: " : "unavailable: ") + r.detail;
}

const nibble_kernel* Plugin::best_kernel(const nibble_layer_desc& d, std::string* why) const {
  const nibble_kernel* best = nullptr;
  for (uint32_t i = 0; i < plugin_.kernel_count; ++i) {
    const nibble_kernel* k = plugin_.kernels[i];
    if (k->op != d.op || k->numeric_mode != d.numeric_mode) continue;
    Err err;
    if (!k->can_implement(k, &d, &err.e)) {
      if (why) *why += std::string(k->name) + ": " + err.e.message + "; ";
      continue;
    }
    if (!best || k->priority > best->priority) best = k;
  }
  return best;
}

const nibble_kernel* Plugin::linear_kernel(const CanonicalWeight& w, int mode,
                                           std::string* why) const {
  return best_kernel(linear_desc(w, mode), why);
}

std::unique_ptr<PreparedLinear> Plugin::prepare(const nibble_kernel* k, const CanonicalWeight& w,
                                                int mode) const {
  const nibble_layer_desc d = linear_desc(w, mode);
  nibble_canonical_weight cw = w.view();
  nibble_weight_input in{};
  in.struct_size = sizeof in;
  in.quantized = &cw;
  return std::make_unique<PreparedLinear>(k, prepare_or_throw(k, d, in));
}

const nibble_kernel* Plugin::moe_kernel(const MoeShape& s, const CanonicalWeight& w13,
                                        const CanonicalWeight& w2, int mode,
                                        std::string* why) const {
  return best_kernel(moe_desc(s, w13, w2, mode), why);
}

namespace {
// Hands the same two canonical weights out as every expert.
struct SharedExperts {
  nibble_canonical_weight w13, w2;
  static nibble_status get(void* ctx, int32_t, nibble_canonical_weight* w13,
                           nibble_canonical_weight* w2, nibble_error*) {
    auto* self = static_cast<SharedExperts*>(ctx);
    *w13 = self->w13;
    *w2 = self->w2;
    return NIBBLE_OK;
  }
  static void put(void*, int32_t) {}
};
}  // namespace

std::unique_ptr<PreparedMoe> Plugin::prepare_moe(const nibble_kernel* k, const MoeShape& s,
                                                 const CanonicalWeight& w13,
                                                 const CanonicalWeight& w2, int mode) const {
  const nibble_layer_desc d = moe_desc(s, w13, w2, mode);
  SharedExperts shared{w13.view(), w2.view()};
  nibble_moe_source src{};
  src.struct_size = sizeof src;
  src.num_experts = s.experts;
  src.ctx = &shared;
  src.get_expert = &SharedExperts::get;
  src.put_expert = &SharedExperts::put;
  nibble_weight_input in{};
  in.struct_size = sizeof in;
  in.experts = &src;
  return std::make_unique<PreparedMoe>(k, prepare_or_throw(k, d, in));
}

PreparedMoe::~PreparedMoe() { k_->release(k_, p_); }

size_t PreparedMoe::bytes() const { return k_->prepared_bytes ? k_->prepared_bytes(k_, p_) : 0; }

void PreparedMoe::forward(const uint16_t* x, const int32_t* ids, const float* weights, uint16_t* y,
                          int64_t M, int64_t K, int64_t top_k, int threads,
                          std::vector<uint8_t>& workspace) const {
  int64_t xs[2] = {M, K}, rs[2] = {M, top_k};
  DLTensor xt = tensor2d(x, sdk::dtype_bf16(), xs), yt = tensor2d(y, sdk::dtype_bf16(), xs);
  DLTensor it = tensor2d(ids, DLDataType{kDLInt, 32, 1}, rs);
  DLTensor wt = tensor2d(weights, sdk::dtype_f32(), rs);
  nibble_forward_args a{};
  a.struct_size = sizeof a;
  a.x = &xt;
  a.y = &yt;
  a.topk_ids = &it;
  a.topk_weights = &wt;
  forward_or_throw(k_, p_, a, M, threads, workspace);
}

PreparedLinear::~PreparedLinear() { k_->release(k_, p_); }

size_t PreparedLinear::bytes() const { return k_->prepared_bytes ? k_->prepared_bytes(k_, p_) : 0; }

void PreparedLinear::forward(const uint16_t* x, uint16_t* y, int64_t M, int64_t K, int64_t N,
                             int threads, std::vector<uint8_t>& workspace) const {
  int64_t xs[2] = {M, K}, ys[2] = {M, N};
  DLTensor xt = tensor2d(x, sdk::dtype_bf16(), xs), yt = tensor2d(y, sdk::dtype_bf16(), ys);
  nibble_forward_args a{};
  a.struct_size = sizeof a;
  a.x = &xt;
  a.y = &yt;
  forward_or_throw(k_, p_, a, M, threads, workspace);
}

}  // namespace nibble::bench
