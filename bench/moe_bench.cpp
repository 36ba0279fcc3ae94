// `nibble bench --moe`: times a backend's fused MoE kernel on Mixtral-, Qwen3-MoE- and
// DeepSeek-like layers against, in the same interleaved rounds, the read bandwidth (for the bytes
// of the experts actually routed to), the AMX peak of the mode's tile type, a loop of the same
// backend's linear calls per expert (what an engine without a fused kernel does), and the same
// loop over oneDNN bf16 matmuls on the dequantized experts.
//
// Cold weights: each variant cycles through copies of its layer totalling at least twice the L3,
// and the routing is rotated by top_k experts every time the cycle comes back to a copy, so an
// expert is read again only after the whole pool has been (decode reads cold experts).
#include "bench_common.hpp"
#include "machine_limits.hpp"
#include "onednn_baseline.hpp"
#include "plugin_client.hpp"
#include "report.hpp"

#include <nibble/parse_number.hpp>
#include <nibble/sdk/device.hpp>
#include <nibble/sdk/numeric.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace nibble::bench {
namespace {

struct NamedShape {
  const char* name;
  MoeShape shape;
};
const NamedShape kShapes[] = {{"mixtral", {4096, 14336, 8, 2}},
                              {"qwen3", {2048, 768, 128, 8}},
                              {"deepseek", {2048, 1408, 64, 6}}};

// A preset's name, or EXPERTSxTOPKxHIDDENxINTERMEDIATE for any other.
MoeShape shape_named(const std::string& name) {
  for (const auto& s : kShapes)
    if (name == s.name) return s.shape;
  std::vector<std::string> parts;
  for (size_t at = 0; at <= name.size();) {
    const size_t x = std::min(name.find('x', at), name.size());
    parts.push_back(name.substr(at, x - at));
    at = x + 1;
  }
  const bool numeric =
      parts.size() == 4 && std::all_of(parts.begin(), parts.end(), [](const std::string& p) {
        return !p.empty() &&
               std::all_of(p.begin(), p.end(), [](char c) { return c >= '0' && c <= '9'; });
      });
  if (numeric) {
    const int64_t experts = parse_integer(parts[0], 1, 4096, "--moe experts of " + name);
    const int64_t top_k = parse_integer(parts[1], 1, 4096, "--moe top_k of " + name);
    const int64_t hidden = parse_integer(parts[2], 1, int64_t(1) << 20, "--moe hidden of " + name);
    const int64_t inter =
        parse_integer(parts[3], 1, int64_t(1) << 20, "--moe intermediate of " + name);
    if (top_k <= experts) return MoeShape{hidden, inter, int32_t(experts), int32_t(top_k)};
  }
  throw std::runtime_error("--moe: unknown shape " + name +
                           " (mixtral, qwen3, deepseek, or EXPERTSxTOPKxHIDDENxINTERMEDIATE with "
                           "1 <= top_k <= experts)");
}

// Routing of M tokens: top_k distinct experts each (uniform), weights normalised to 1.
struct Routing {
  std::vector<int32_t> ids;
  std::vector<float> weights;
  int64_t experts_used = 0;
};
Routing random_routing(int64_t M, const MoeShape& s, uint32_t seed) {
  std::mt19937 rng(seed);
  Routing r;
  r.ids.resize(size_t(M * s.top_k));
  r.weights.resize(size_t(M * s.top_k));
  std::vector<int32_t> perm(size_t(s.num_experts));
  std::uniform_real_distribution<float> u(0.1f, 1.f);
  for (int64_t m = 0; m < M; ++m) {
    std::iota(perm.begin(), perm.end(), 0);
    float total = 0;
    for (int64_t j = 0; j < s.top_k; ++j) {
      std::swap(perm[size_t(j)], perm[size_t(j) + rng() % size_t(s.num_experts - j)]);
      r.ids[size_t(m * s.top_k + j)] = perm[size_t(j)];
      total += r.weights[size_t(m * s.top_k + j)] = u(rng);
    }
    for (int64_t j = 0; j < s.top_k; ++j) r.weights[size_t(m * s.top_k + j)] /= total;
  }
  std::vector<bool> used(size_t(s.num_experts), false);
  for (int32_t e : r.ids) used[size_t(e)] = true;
  r.experts_used = std::count(used.begin(), used.end(), true);
  return r;
}

// The routing of call t of a variant that cycles over `copies` layer copies: the base routing
// with every id shifted by top_k for each completed cycle (a bijection: the same load per call).
void rotated_ids(const Routing& base, const MoeShape& s, int64_t t, int64_t copies,
                 std::vector<int32_t>& out) {
  const int64_t shift = ((t / copies) * s.top_k) % s.num_experts;
  out.resize(base.ids.size());
  for (size_t i = 0; i < base.ids.size(); ++i)
    out[i] = int32_t((base.ids[i] + shift) % s.num_experts);
}

float silu_times(float gate, float up) { return gate / (1.f + std::exp(-gate)) * up; }

// The loop's buffers, kept across calls as an engine would keep them.
struct LoopBuffers {
  std::vector<std::vector<int64_t>> slots;
  std::vector<float> acc;
  std::vector<uint16_t> xe, gu, h, down;
};

// The unfused baseline: per expert, gather its tokens, w13, silu(gate)·up in fp32 rounded to
// bf16, w2, and a weighted fp32 sum per token; `project(e, which, x, y, n)` runs one projection.
template <class Project>
void moe_loop(const MoeShape& s, int64_t M, const uint16_t* x, const std::vector<int32_t>& ids,
              const std::vector<float>& weights, uint16_t* y, LoopBuffers& b,
              const Project& project) {
  const int64_t K = s.hidden, I = s.intermediate;
  auto& slots = b.slots;
  slots.resize(size_t(s.num_experts));
  for (auto& v : slots) v.clear();
  for (int64_t i = 0; i < M * s.top_k; ++i) slots[size_t(ids[size_t(i)])].push_back(i);
  auto& acc = b.acc;
  acc.assign(size_t(M * K), 0.f);
  auto &xe = b.xe, &gu = b.gu, &h = b.h, &down = b.down;
  for (int64_t e = 0; e < s.num_experts; ++e) {
    const auto& sl = slots[size_t(e)];
    const int64_t n = int64_t(sl.size());
    if (n == 0) continue;
    xe.resize(size_t(n * K));
    for (int64_t r = 0; r < n; ++r)
      std::copy_n(x + (sl[size_t(r)] / s.top_k) * K, K, xe.begin() + r * K);
    gu.resize(size_t(n * 2 * I));
    project(e, 0, xe.data(), gu.data(), n);
    h.resize(size_t(n * I));
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < I; ++c)
        h[size_t(r * I + c)] =
            sdk::f32_to_bf16(silu_times(sdk::bf16_to_f32(gu[size_t(r * 2 * I + c)]),
                                        sdk::bf16_to_f32(gu[size_t(r * 2 * I + I + c)])));
    down.resize(size_t(n * K));
    project(e, 1, h.data(), down.data(), n);
    for (int64_t r = 0; r < n; ++r) {
      const float w = weights[size_t(sl[size_t(r)])];
      float* a = acc.data() + (sl[size_t(r)] / s.top_k) * K;
      for (int64_t k = 0; k < K; ++k) a[k] += w * sdk::bf16_to_f32(down[size_t(r * K + k)]);
    }
  }
  for (size_t i = 0; i < acc.size(); ++i) y[i] = sdk::f32_to_bf16(acc[i]);
}

// The rms of the difference of two bf16 outputs over the rms of the first.
double relative_difference(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
  double ss = 0, sd = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double va = sdk::bf16_to_f32(a[i]), vb = sdk::bf16_to_f32(b[i]);
    ss += va * va;
    sd += (va - vb) * (va - vb);
  }
  return ss > 0 ? std::sqrt(sd / ss) : std::sqrt(sd);
}

// The MoE bench at one thread count: every shape, mode and M, with the limits sampled at
// `threads` threads. Cases go to out["cases"], limits to `run_limits`.
void run_moe_at(const Options& o, int threads, const Plugin& plugin,
                const std::vector<std::pair<std::string, MoeShape>>& shapes, size_t cold, bool amx,
                nlohmann::json& out, RunLimits& run_limits) {
  ReadBandwidth bandwidth(std::max<size_t>(cold, size_t(512) << 20), threads);
  bandwidth.sample();
  std::printf("\nthreads %d (limits and oneDNN at %d threads too)\n", threads, threads);
  std::printf("%-9s %5s %-6s %-8s %22s %8s %7s %6s %8s %6s %10s %7s %10s %7s\n", "shape", "M",
              "mode", "kernel", "median (min-max) us", "routedMB", "GB/s", "%BW", "TFLOP/s",
              "%peak", "loop us", "vs loop", "oneDNN us", "vs dnn");

  for (const auto& [name, s] : shapes) {
    const CanonicalWeight w13 = random_weight(s.hidden, 2 * s.intermediate, o.bits, o.group, 13);
    const CanonicalWeight w2 = random_weight(s.intermediate, s.hidden, o.bits, o.group, 2);
    std::unique_ptr<OnednnMatmul> dense13, dense2;
    int64_t dense_copies = 0;
    if (o.onednn) {
      const size_t layer = size_t(s.num_experts) * size_t(3 * s.hidden * s.intermediate) * 2;
      dense_copies = int64_t(std::max<size_t>(2, (cold + layer - 1) / layer));
      dense13 = std::make_unique<OnednnMatmul>(dequantized(w13), s.hidden, 2 * s.intermediate,
                                               int(dense_copies * s.num_experts), threads);
      dense2 = std::make_unique<OnednnMatmul>(dequantized(w2), s.intermediate, s.hidden,
                                              int(dense_copies * s.num_experts), threads);
    }
    for (const std::string& mode_name : o.modes) {
      const int mode = mode_name == "w4a16" ? NIBBLE_MODE_W4A16 : NIBBLE_MODE_W4A8;
      std::string why;
      const nibble_kernel* k = plugin.moe_kernel(s, w13, w2, mode, &why);
      const nibble_kernel* k13 = plugin.linear_kernel(w13, mode, &why);
      const nibble_kernel* k2 = plugin.linear_kernel(w2, mode, &why);
      if (!k || !k13 || !k2) {
        std::printf("%s %s: no kernel (%s)\n", name.c_str(), mode_name.c_str(), why.c_str());
        continue;
      }
      std::vector<std::unique_ptr<PreparedMoe>> fused;
      fused.push_back(plugin.prepare_moe(k, s, w13, w2, mode));
      const size_t layer_bytes = fused[0]->bytes();
      const int64_t copies =
          int64_t(std::max<size_t>(2, (cold + layer_bytes - 1) / std::max<size_t>(1, layer_bytes)));
      const double prep_s = seconds_of([&] {
        while (int64_t(fused.size()) < copies)
          fused.push_back(plugin.prepare_moe(k, s, w13, w2, mode));
      });
      // The loop's per-expert linear layers: [copy][expert][w13, w2].
      std::vector<std::unique_ptr<PreparedLinear>> linears;
      for (int64_t c = 0; c < copies; ++c)
        for (int64_t e = 0; e < s.num_experts; ++e) {
          linears.push_back(plugin.prepare(k13, w13, mode));
          linears.push_back(plugin.prepare(k2, w2, mode));
        }
      const double ckpt_bytes =
          double(s.num_experts) *
          (double(3 * s.hidden * s.intermediate) * o.bits / 8 +
           double(w13.num_groups * w13.N + w2.num_groups * w2.N) * (2 + o.bits / 8.0));
      sdk::host::Workspace ws, ws13, ws2;
      for (int64_t M : o.rows) {
        const Routing base = random_routing(M, s, uint32_t(M * 7 + 1));
        const double routed_bytes =
            double(layer_bytes) / double(s.num_experts) * double(base.experts_used);
        const double flops = 6.0 * double(M * s.top_k) * double(s.hidden * s.intermediate);
        const std::vector<uint16_t> x = random_bf16(M * s.hidden, uint32_t(M));
        std::vector<uint16_t> y(size_t(M * s.hidden)), yl(y.size()), yd(y.size());
        std::vector<int32_t> ids;
        LoopBuffers loop_buffers, dense_buffers;
        int64_t tf = 0, tl = 0, td = 0;  // each variant's call count
        auto call_fused = [&] {
          rotated_ids(base, s, tf, copies, ids);
          fused[size_t(tf++ % copies)]->forward(x.data(), ids.data(), base.weights.data(), y.data(),
                                                M, s.hidden, s.top_k, threads, ws);
        };
        auto call_loop = [&] {
          rotated_ids(base, s, tl, copies, ids);
          const int64_t c = tl++ % copies;
          moe_loop(s, M, x.data(), ids, base.weights, yl.data(), loop_buffers,
                   [&](int64_t e, int which, const uint16_t* in, uint16_t* o_, int64_t n) {
                     linears[size_t((c * s.num_experts + e) * 2 + which)]->forward(
                         in, o_, n, which ? s.intermediate : s.hidden,
                         which ? s.hidden : 2 * s.intermediate, threads, which ? ws2 : ws13);
                   });
        };
        auto call_dense = [&] {
          rotated_ids(base, s, td, dense_copies, ids);
          const int64_t c = td++ % dense_copies;
          moe_loop(s, M, x.data(), ids, base.weights, yd.data(), dense_buffers,
                   [&](int64_t e, int which, const uint16_t* in, uint16_t* o_, int64_t n) {
                     (which ? *dense2 : *dense13).run(int(c * s.num_experts + e), in, o_, n);
                   });
        };
        // Warm-up (creates oneDNN's primitives for every row count) and an agreement check on
        // the same routing; then the fused call's time sizes the samples of all three.
        const double first_fused = seconds_of(call_fused);
        call_loop();
        if (o.onednn) call_dense();
        const double disagreement = relative_difference(yl, y);
        const int calls =
            sample_calls(o.burst, first_fused, [&] { return seconds_of(call_fused); });
        std::vector<double> t_fused, t_loop, t_dense, r_loop, r_dense;
        LimitSamples limits;
        interleaved_rounds(o, threads, bandwidth, amx, mode, limits, [&] {
          const double a = timed_sample(calls, call_fused);
          const double b = timed_sample(calls, call_loop);
          t_fused.push_back(a);
          t_loop.push_back(b);
          r_loop.push_back(b / a);
          if (o.onednn) {
            const double d = timed_sample(calls, call_dense);
            t_dense.push_back(d);
            r_dense.push_back(d / a);
          }
        });
        const Stats sf = stats(t_fused), sl = stats(t_loop), sd = stats(t_dense),
                    srl = stats(r_loop), srd = stats(r_dense), sbw = stats(limits.bandwidth),
                    sp = stats(limits.peak);
        run_limits.add(limits, mode);
        const double gbps = routed_bytes / sf.median / 1e9;
        const double tflops = flops / sf.median / 1e12;
        const double r_bw = gbps / sbw.median;
        const double r_peak = amx ? tflops / sp.median : 0;
        std::printf(
            "%-9s %5lld %-6s %-8s %8.0f (%6.0f-%6.0f) %8.1f %7.1f %5.0f%% %8.3f %5.0f%% %10.0f "
            "%6.2fx",
            name.c_str(), (long long)M, mode_name.c_str(), k->name, sf.median * 1e6, sf.min * 1e6,
            sf.max * 1e6, routed_bytes / 1e6, gbps, 100 * r_bw, tflops, 100 * r_peak,
            sl.median * 1e6, srl.median);
        if (o.onednn) std::printf(" %10.0f %6.2fx", sd.median * 1e6, srd.median);
        if (calls < o.burst) std::printf("  [%d calls per sample]", calls);
        std::printf("\n");
        std::fflush(stdout);
        nlohmann::json c;
        c["kind"] = "moe";
        c["shape"] = name;
        c["K"] = s.hidden;
        c["N"] = s.intermediate;
        c["experts"] = s.num_experts;
        c["top_k"] = s.top_k;
        c["experts_routed"] = base.experts_used;
        put_case_identity(c, o, M, threads, mode_name, k->name);
        c["seconds"] = to_json(sf);
        c["calls_per_sample"] = calls;
        c["weight_bytes"] = routed_bytes;
        c["flops"] = flops;
        c["layer_bytes"] = layer_bytes;
        c["checkpoint_bytes"] = ckpt_bytes;
        c["prepared_over_checkpoint"] = double(layer_bytes) / ckpt_bytes;
        c["layer_copies"] = copies;
        c["prepare_gbps"] = ckpt_bytes * double(copies - 1) / prep_s / 1e9;
        c["weight_gbps"] = gbps;
        c["tflops"] = tflops;
        c["read_gbps"] = to_json(sbw);
        c["ratio_bandwidth"] = r_bw;
        c["loop_kernels"] = std::string(k13->name) + "," + k2->name;
        c["loop_seconds"] = to_json(sl);
        c["speedup_loop"] = to_json(srl);
        c["loop_relative_difference"] = disagreement;
        if (amx) {
          limits.put_amx(c, mode, tflops);
        }
        if (o.onednn) {
          c["onednn_bf16_seconds"] = to_json(sd);
          c["speedup_onednn"] = to_json(srd);
        }
        out["cases"].push_back(c);
      }
    }
  }
}

}  // namespace

int run_moe(const Options& o) {
  std::vector<std::pair<std::string, MoeShape>> shapes;
  for (const auto& n : o.moe) shapes.emplace_back(n, shape_named(n));
  // Packing uses the plugin's thread budget: the most threads of the run.
  Plugin plugin(o.plugin_dir, o.backend, o.threads.back());
  // The MoE variants route on the host and loop experts over host buffers between calls.
  if (plugin.device())
    throw std::runtime_error("the MoE bench times layers in host memory; " + o.backend +
                             "'s layers run on " + sdk::device_name(plugin.device().dl_device()) +
                             " (the linear bench times those)");
  const size_t l3 = l3_bytes();
  const size_t cold = cold_bytes_of(o, l3);
  const bool amx = amx_usable();
  std::printf("backend %s: %s\n", o.backend.c_str(), plugin.probe_detail().c_str());
  std::printf(
      "threads %s, L3 %.0f MiB, each variant cycles over >= %.0f MiB of layer copies, %d calls "
      "per sample (fewer where that many take over %.0f ms), AMX peaks %s\n",
      thread_list(o).c_str(), double(l3) / (1 << 20), double(cold) / (1 << 20), o.burst,
      kSampleSeconds * 1e3, amx ? "measured" : "not available");
  nlohmann::json out = run_header(o, plugin.probe_detail(), l3, cold);
  LimitsByThreads limits;
  for (int threads : o.threads)
    run_moe_at(o, threads, plugin, shapes, cold, amx, out, limits[threads]);
  return finish_run(out, o, limits, amx);
}

}  // namespace nibble::bench
