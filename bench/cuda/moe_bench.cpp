// The fused MoE through the cuda plugin's C ABI: E experts K × 2I and I × K (Mixtral-like by
// default: 8, top-2, K 4096, I 14336; 4-bit group 128), tensors from the plugin's device memory,
// forwards queued on the bench's stream. Routings rotate over 16 random choices of top_k distinct
// experts per token; the bytes a call must read are the packed weights of the experts its
// routing touches.
#include <nibble/sdk/host.hpp>
#include <nibble/sdk/numeric.hpp>

#include <cmath>
#include <cstdio>
#include <random>
#include <set>
#include <stdexcept>
#include <utility>
#include <vector>

#include "timing.hpp"

namespace nibble::cuda::bench {

namespace {

// Random 4-bit g128 [N][K] with f16 scales, owned: symmetric, or with random zero points.
struct Expert {
  std::vector<uint8_t> q, zeros;
  std::vector<uint16_t> scales;
  nibble_canonical_weight c{};
  Expert(int64_t K, int64_t N, std::mt19937& rng, bool asymmetric) {
    const int64_t G = K / 128;
    q.resize(size_t(K * N));
    for (size_t i = 0; i < q.size(); i += 8) {
      const uint32_t r = rng();
      for (size_t j = 0; j < 8 && i + j < q.size(); ++j) q[i + j] = uint8_t((r >> (4 * j)) & 15);
    }
    zeros.assign(size_t(G * N), 8);
    if (asymmetric)
      for (auto& z : zeros) z = uint8_t(rng() & 15);
    scales.resize(size_t(G * N));
    for (auto& s : scales) s = sdk::f32_to_f16((0.5f + float(rng() % 1000) / 1000.f) / 400.f);
    c.struct_size = sizeof c;
    c.bits = 4;
    c.group_size = 128;
    c.K = K;
    c.N = N;
    c.num_groups = G;
    c.q = q.data();
    c.scales = scales.data();
    c.scales_dtype = sdk::dtype_f16();
    c.zeros = zeros.data();
  }
};

// A 2-D tensor in the plugin's device memory.
struct PluginTensor {
  const nibble_plugin& p;
  void* ptr = nullptr;
  size_t bytes;
  int64_t shape[2];
  DLTensor t{};
  PluginTensor(const nibble_plugin& plugin, int64_t rows, int64_t cols, DLDataType dtype,
               const void* host)
      : p(plugin), bytes(size_t(rows * cols) * sdk::dtype_bytes(dtype)), shape{rows, cols} {
    sdk::host::ErrorBuffer err;
    if (p.device_memory->alloc(p.plugin_context, 0, bytes, &ptr, err.get()) != NIBBLE_OK)
      throw std::runtime_error("device alloc: " + err.text());
    if (host) {
      p.device_memory->copy(p.plugin_context, 0, ptr, host, bytes, NIBBLE_COPY_HOST_TO_DEVICE,
                            nullptr, err.get());
      p.device_memory->synchronize(p.plugin_context, 0, nullptr, err.get());
    }
    t.data = ptr;
    t.device = DLDevice{kDLCUDA, 0};
    t.ndim = 2;
    t.dtype = dtype;
    t.shape = shape;
  }
  ~PluginTensor() { p.device_memory->free(p.plugin_context, 0, ptr); }
};

}  // namespace

nlohmann::json run_moe(const std::string& plugin_path, int iters, double peak_tbs,
                       const Device& dev, const MoeBenchShape& s) {
  const int E = s.experts, top_k = s.top_k;
  const int64_t K = s.K, I = s.I;
  if (E < 1 || top_k < 1 || top_k > E || K < 1 || I < 1)
    throw std::runtime_error("--moe-shape: needs 1 <= top_k <= experts and positive K, I");
  sdk::host::LoadedPlugin plugin = sdk::host::LoadedPlugin::load(plugin_path, 1);
  const nibble_plugin& p = plugin.descriptor();
  const nibble_kernel* k = plugin.kernel("moe_marlin");
  if (!k || !p.device_memory) throw std::runtime_error("the plugin has no moe_marlin kernel");
  std::mt19937 rng(5);
  std::vector<Expert> w13, w2;
  w13.reserve(E);
  w2.reserve(E);
  std::vector<nibble_canonical_weight> v13, v2;
  for (int e = 0; e < E; ++e) {
    w13.emplace_back(K, 2 * I, rng, s.asymmetric);
    w2.emplace_back(I, K, rng, s.asymmetric);
    v13.push_back(w13.back().c);
    v2.push_back(w2.back().c);
  }
  const sdk::host::MoeShape shape{K, I, E, top_k};
  nibble_layer_desc d = sdk::host::moe_desc(shape, v13, v2, "bench.moe");
  d.device_type = kDLCUDA;
  d.device_id = 0;
  d.act_dtypes = NIBBLE_DTYPE_BF16;
  sdk::host::ExpertViews views(v13, v2);
  std::printf("\nMoE %d experts top-%d, K %lld, I %lld, 4-bit g128, %s (preparing...)\n", E, top_k,
              (long long)K, (long long)I, s.asymmetric ? "random zero points" : "symmetric");
  sdk::host::Prepared prepared = sdk::host::prepare(k, d, sdk::host::experts_input(views.source()));
  const double expert_bytes = double(prepared.bytes()) / E;
  nlohmann::json rows = nlohmann::json::array();
  std::printf("%6s %10s %12s %10s %8s %10s\n", "M", "nibble us", "experts read", "TB/s", "% HBM",
              "% copy");
  for (int64_t M : {1, 4, 16}) {
    std::vector<uint16_t> xh(size_t(M * K));
    std::normal_distribution<float> nd(0.f, 1.f);
    for (auto& v : xh) v = sdk::f32_to_bf16(nd(rng));
    PluginTensor x(p, M, K, sdk::dtype_bf16(), xh.data()), y(p, M, K, sdk::dtype_bf16(), nullptr);
    // 16 routings, each token with top_k distinct experts.
    std::vector<std::unique_ptr<PluginTensor>> ids, wts;
    double touched = 0;
    for (int r = 0; r < 16; ++r) {
      std::vector<int32_t> id(size_t(M * top_k));
      std::vector<float> wt(size_t(M * top_k), 1.f / float(top_k));
      std::set<int32_t> used;
      std::vector<int32_t> all(static_cast<size_t>(E));
      for (int e = 0; e < E; ++e) all[size_t(e)] = e;
      for (int64_t m = 0; m < M; ++m) {
        for (int j = 0; j < top_k; ++j) {  // a partial shuffle: top_k distinct experts
          std::swap(all[size_t(j)], all[size_t(j) + rng() % size_t(E - j)]);
          id[size_t(m * top_k + j)] = all[size_t(j)];
          used.insert(all[size_t(j)]);
        }
      }
      touched += double(used.size()) / 16;
      ids.push_back(std::make_unique<PluginTensor>(p, M, top_k, sdk::dtype_i32(), id.data()));
      wts.push_back(std::make_unique<PluginTensor>(p, M, top_k, sdk::dtype_f32(), wt.data()));
    }
    sdk::host::Workspace ws;
    nibble_exec exec{};
    exec.struct_size = sizeof exec;
    exec.num_threads = 1;
    exec.stream = dev.stream;
    const Timing tm = time_calls(iters, dev.stream, [&](int i) {
      const nibble_forward_args a =
          sdk::host::forward_args(x.t, y.t, &ids[size_t(i % 16)]->t, &wts[size_t(i % 16)]->t);
      prepared.forward(a, exec);
    });
    const double us = tm.device_us;
    const double tbs = touched * expert_bytes / (us * 1e-6) / 1e12;
    std::printf("%6lld %10.2f %12.2f %10.2f %7.1f%% %9.1f%%\n", (long long)M, us, touched, tbs,
                100 * tbs / peak_tbs, 100 * tbs / dev.copy_tbs);
    rows.push_back({{"M", M},
                    {"nibble_us", us},
                    {"host_us", tm.host_us},
                    {"experts_read", touched},
                    {"expert_bytes", expert_bytes},
                    {"tbs", tbs},
                    {"pct_of_peak", 100 * tbs / peak_tbs},
                    {"pct_of_copy", 100 * tbs / dev.copy_tbs}});
  }
  return rows;
}

}  // namespace nibble::cuda::bench
