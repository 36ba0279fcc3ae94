#include "plugin_client.hpp"

#include <nibble/sdk/numeric.hpp>

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
  w.num_groups = (K + gs - 1) / gs;
  std::mt19937 rng(seed);
  const uint32_t maxq = (1u << bits) - 1;
  w.q.resize(size_t(K * N));
  for (size_t i = 0; i < w.q.size(); i += 4) {
    uint32_t r = rng();
    for (size_t j = 0; j < 4 && i + j < w.q.size(); ++j)
      w.q[i + j] = uint8_t((r >> (8 * j)) & maxq);
  }
  w.zeros.resize(size_t(w.num_groups * N));
  for (auto& z : w.zeros) z = uint8_t(rng() & maxq);
  w.scales_dtype = sdk::dtype_f16();
  w.scales.resize(size_t(w.num_groups * N) * 2);
  std::uniform_real_distribution<float> mag(0.5f, 1.5f);
  for (int64_t i = 0; i < w.num_groups * N; ++i)
    sdk::store_float(w.scales.data(), w.scales_dtype, size_t(i), mag(rng) / (float(maxq) * 64.f));
  return w;
}

std::vector<float> dequantized(const CanonicalWeight& w) {
  std::vector<float> d(size_t(w.K * w.N));
  for (int64_t n = 0; n < w.N; ++n)
    for (int64_t k = 0; k < w.K; ++k) d[size_t(n * w.K + k)] = float(w.dequant(n, k));
  return d;
}

nibble_layer_desc linear_desc(const CanonicalWeight& w, int mode, DLDevice device) {
  nibble_layer_desc d = sdk::host::linear_desc(w.view(), "bench.linear", mode, NIBBLE_DTYPE_BF16);
  sdk::host::set_layer_device(d, device);
  return d;
}

nibble_layer_desc moe_desc(const MoeShape& s, const CanonicalWeight& w13, const CanonicalWeight& w2,
                           int mode, DLDevice device) {
  // Every expert is the same two weights, so the descriptor may speak for all of them.
  nibble_layer_desc d = sdk::host::moe_desc(
      s, std::vector<nibble_canonical_weight>(size_t(s.num_experts), w13.view()),
      std::vector<nibble_canonical_weight>(size_t(s.num_experts), w2.view()), "bench.moe", mode,
      NIBBLE_DTYPE_BF16);
  sdk::host::set_layer_device(d, device);
  return d;
}

LayerMemory::LayerMemory(const Plugin& plugin, void* host, size_t bytes)
    : plugin_(plugin), host_(host), bytes_(bytes) {
  if (!plugin.device() || bytes == 0) return;
  on_device_ = plugin.device().alloc(bytes);
  on_device_.upload(host, bytes, nullptr);
  plugin.synchronize(nullptr);
}

void LayerMemory::read_back() const {
  if (!on_device_.get()) return;
  on_device_.download(host_, bytes_, nullptr);
  plugin_.synchronize(nullptr);
}

namespace {

// One forward call of M rows with bf16 activations, queued on `stream` on a device.
void forward_bf16(const sdk::host::Prepared& p, const nibble_forward_args& a, int64_t M,
                  int threads, sdk::host::Workspace& workspace, void* stream) {
  try {
    p.forward(a, M, threads, workspace, stream);
  } catch (const sdk::host::CallError& e) {
    throw std::runtime_error(std::string(p.kernel()->name) + " " + e.what());
  }
}

sdk::host::Prepared prepare_or_throw(const nibble_kernel* k, const nibble_layer_desc& d,
                                     const nibble_weight_input& in) {
  try {
    return sdk::host::prepare(k, d, in);
  } catch (const sdk::host::CallError& e) {
    throw std::runtime_error(std::string(k->name) + " " + e.what());
  }
}

// Device 0 of `p`'s device memory when one of its kernels runs there and the machine has one.
sdk::host::Device layer_device(const sdk::host::LoadedPlugin& p) {
#if NIBBLE_ABI_MINOR >= 3
  const sdk::host::Device device = p.device(0);
  if (!device) return {};
  for (const nibble_kernel* k : p.kernels())
    if (sdk::host::kernel_device_type(k) == device.dl_device().device_type)
      return device.count() > 0 ? device : sdk::host::Device();
#else
  (void)p;
#endif
  return {};
}

}  // namespace

Plugin::Plugin(const std::string& dir, const std::string& name, int threads)
    : plugin_(sdk::host::LoadedPlugin::load(dir + "/libnibble_" + name + ".so", threads)),
      device_(layer_device(plugin_)) {}

std::string Plugin::probe_detail() const {
  try {
    const nibble_probe_result r = plugin_.probe();
    return std::string(r.available ? "available: " : "unavailable: ") + r.detail;
  } catch (const sdk::host::CallError&) {
    return "probe failed";
  }
}

const nibble_kernel* Plugin::best_kernel(const nibble_layer_desc& d, std::string* why) const {
  const nibble_kernel* best = nullptr;
  bool candidates = false;
  for (const nibble_kernel* k : plugin_.kernels()) {
    if (k->op != d.op || k->numeric_mode != d.numeric_mode) continue;
    // Layers go where the plugin's device is: its other kernels are not candidates.
    if (sdk::host::kernel_device_type(k) != device_.dl_device().device_type) continue;
    candidates = true;
    std::string reason;
    if (!sdk::host::can_implement(k, d, &reason)) {
      if (why) *why += std::string(k->name) + ": " + reason + "; ";
      continue;
    }
    if (!best || k->priority > best->priority) best = k;
  }
  if (!candidates && why)
    *why = "the backend has no kernel for this operation in this numeric mode on its device";
  return best;
}

const nibble_kernel* Plugin::linear_kernel(const CanonicalWeight& w, int mode,
                                           std::string* why) const {
  return best_kernel(linear_desc(w, mode, device_.dl_device()), why);
}

std::unique_ptr<PreparedLinear> Plugin::prepare(const nibble_kernel* k, const CanonicalWeight& w,
                                                int mode) const {
  const nibble_canonical_weight view = w.view();
  return std::make_unique<PreparedLinear>(
      prepare_or_throw(k, linear_desc(w, mode, device_.dl_device()),
                       sdk::host::quantized_input(view)),
      device_.dl_device());
}

const nibble_kernel* Plugin::moe_kernel(const MoeShape& s, const CanonicalWeight& w13,
                                        const CanonicalWeight& w2, int mode,
                                        std::string* why) const {
  return best_kernel(moe_desc(s, w13, w2, mode, device_.dl_device()), why);
}

std::unique_ptr<PreparedMoe> Plugin::prepare_moe(const nibble_kernel* k, const MoeShape& s,
                                                 const CanonicalWeight& w13,
                                                 const CanonicalWeight& w2, int mode) const {
  sdk::host::ExpertViews experts(
      std::vector<nibble_canonical_weight>(size_t(s.num_experts), w13.view()),
      std::vector<nibble_canonical_weight>(size_t(s.num_experts), w2.view()));
  return std::make_unique<PreparedMoe>(
      prepare_or_throw(k, moe_desc(s, w13, w2, mode, device_.dl_device()),
                       sdk::host::experts_input(experts.source())),
      device_.dl_device());
}

namespace {
nibble_dense_weight dense_weight(const uint16_t* w, int64_t K, int64_t N) {
  nibble_dense_weight d{};
  d.struct_size = sizeof d;
  d.K = K;
  d.N = N;
  d.data = w;
  d.dtype = sdk::dtype_bf16();
  return d;
}

nibble_layer_desc dense_desc(const nibble_dense_weight& w, DLDevice device) {
  nibble_layer_desc d = sdk::host::dense_desc(w, "bench.dense", NIBBLE_DTYPE_BF16);
  sdk::host::set_layer_device(d, device);
  return d;
}
}  // namespace

const nibble_kernel* Plugin::dense_kernel(int64_t K, int64_t N, std::string* why) const {
  const uint16_t none = 0;
  return best_kernel(dense_desc(dense_weight(&none, K, N), device_.dl_device()), why);
}

std::unique_ptr<PreparedLinear> Plugin::prepare_dense(const nibble_kernel* k,
                                                      const std::vector<uint16_t>& w, int64_t K,
                                                      int64_t N) const {
  const nibble_dense_weight view = dense_weight(w.data(), K, N);
  return std::make_unique<PreparedLinear>(
      prepare_or_throw(k, dense_desc(view, device_.dl_device()), sdk::host::dense_input(view)),
      device_.dl_device());
}

void PreparedMoe::forward(const uint16_t* x, const int32_t* ids, const float* weights, uint16_t* y,
                          int64_t M, int64_t K, int64_t top_k, int threads,
                          sdk::host::Workspace& workspace, void* stream) const {
  int64_t xs[2] = {M, K}, rs[2] = {M, top_k};
  const DLTensor xt = sdk::host::matrix_view(x, sdk::dtype_bf16(), xs, device_);
  DLTensor yt = sdk::host::matrix_view(y, sdk::dtype_bf16(), xs, device_);
  const DLTensor it = sdk::host::matrix_view(ids, sdk::dtype_i32(), rs, device_);
  const DLTensor wt = sdk::host::matrix_view(weights, sdk::dtype_f32(), rs, device_);
  forward_bf16(p_, sdk::host::forward_args(xt, yt, &it, &wt), M, threads, workspace, stream);
}

void PreparedLinear::forward(const uint16_t* x, uint16_t* y, int64_t M, int64_t K, int64_t N,
                             int threads, sdk::host::Workspace& workspace, void* stream) const {
  int64_t xs[2] = {M, K}, ys[2] = {M, N};
  const DLTensor xt = sdk::host::matrix_view(x, sdk::dtype_bf16(), xs, device_);
  DLTensor yt = sdk::host::matrix_view(y, sdk::dtype_bf16(), ys, device_);
  forward_bf16(p_, sdk::host::forward_args(xt, yt), M, threads, workspace, stream);
}

}  // namespace nibble::bench
