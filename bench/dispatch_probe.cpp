// `nibble bench --dispatch`: what one forward call costs beyond reading its weights. Through the
// same plugin client as the bench, at each thread count, it times M = 1 on a 128x128 layer (64 KiB
// of weights: nearly an empty forward), on 2048x2048 and 4096x4096, and M = 16 on 2048x2048, all
// with hot weights (one prepared copy called again and again, so it stays in the cache), each call
// timed on its own. The 128x128 median is the fixed cost of a call (waking the threads,
// partitioning, preparing the activations, joining); the larger layers show how it adds to the
// time their weights take.
#include "bench_common.hpp"
#include "plugin_client.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

namespace nibble::bench {
namespace {

struct ProbeLayer {
  int64_t K, N, M;
};
constexpr ProbeLayer kLayers[] = {
    {128, 128, 1}, {2048, 2048, 1}, {4096, 4096, 1}, {2048, 2048, 16}};

// The q-th quantile (0..1) of a sorted sample, by the nearest rank.
double quantile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  const size_t i = size_t(q * double(sorted.size() - 1) + 0.5);
  return sorted[std::min(i, sorted.size() - 1)];
}

}  // namespace

int run_dispatch(const Options& o) {
  Plugin plugin(o.plugin_dir, o.backend, o.threads.back());
  std::printf("backend %s: %s\n", o.backend.c_str(), plugin.probe_detail().c_str());
  std::printf(
      "per-call cost, hot weights, at least %lld calls and %.2f s per layer, each call timed, "
      "%lld us idle between calls\n",
      (long long)o.dispatch_calls, o.dispatch_seconds, (long long)o.dispatch_gap_us);
  std::vector<CanonicalWeight> weights;
  for (const ProbeLayer& l : kLayers)
    weights.push_back(random_weight(l.K, l.N, o.bits, o.group, uint32_t(l.K * 31 + l.N)));
  nlohmann::json out;
  out["backend"] = o.backend;
  out["probe"] = plugin.probe_detail();
  out["threads"] = o.threads.back();
  out["thread_counts"] = o.threads;
  out["dispatch"] = nlohmann::json::array();
  for (int threads : o.threads) {
    std::printf("\nthreads %d\n%-10s %5s %-6s %-11s %10s %10s %10s %10s %8s\n", threads, "KxN", "M",
                "mode", "kernel", "median us", "p10 us", "p90 us", "min us", "calls");
    for (size_t li = 0; li < std::size(kLayers); ++li) {
      const ProbeLayer& l = kLayers[li];
      const CanonicalWeight& w = weights[li];
      for (const std::string& mode_name : o.modes) {
        const int mode = mode_name == "w4a16" ? NIBBLE_MODE_W4A16 : NIBBLE_MODE_W4A8;
        std::string why;
        const nibble_kernel* k = plugin.linear_kernel(w, mode, &why);
        if (!k) {
          std::printf("%lldx%lld %s: no kernel (%s)\n", (long long)l.K, (long long)l.N,
                      mode_name.c_str(), why.c_str());
          continue;
        }
        const std::unique_ptr<PreparedLinear> layer = plugin.prepare(k, w, mode);
        const std::vector<uint16_t> x = random_bf16(l.M * l.K, uint32_t(l.M));
        std::vector<uint16_t> y(size_t(l.M * l.N));
        sdk::host::Workspace ws;
        auto call = [&] { layer->forward(x.data(), y.data(), l.M, l.K, l.N, threads, ws); };
        for (int r = 0; r < 10; ++r) call();  // workspace sized, weights and code in the cache
        std::vector<double> t;
        const auto start = std::chrono::steady_clock::now();
        auto elapsed = [&] {
          return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        };
        while ((int64_t(t.size()) < o.dispatch_calls || elapsed() < o.dispatch_seconds) &&
               t.size() < 10000000) {
          if (o.dispatch_gap_us > 0)
            std::this_thread::sleep_for(std::chrono::microseconds(o.dispatch_gap_us));
          t.push_back(seconds_of(call) * 1e6);
        }
        std::sort(t.begin(), t.end());
        const double median = quantile(t, 0.5), p10 = quantile(t, 0.1), p90 = quantile(t, 0.9);
        std::printf("%4lldx%-5lld %5lld %-6s %-11s %10.2f %10.2f %10.2f %10.2f %8zu\n",
                    (long long)l.K, (long long)l.N, (long long)l.M, mode_name.c_str(), k->name,
                    median, p10, p90, t.front(), t.size());
        std::fflush(stdout);
        nlohmann::json d;
        d["threads"] = threads;
        d["gap_us"] = o.dispatch_gap_us;
        d["K"] = l.K;
        d["N"] = l.N;
        d["M"] = l.M;
        d["mode"] = mode_name;
        d["kernel"] = k->name;
        d["weight_bytes"] = layer->bytes();
        d["calls"] = t.size();
        d["median_us"] = median;
        d["p10_us"] = p10;
        d["p90_us"] = p90;
        d["min_us"] = t.front();
        out["dispatch"].push_back(d);
      }
    }
  }
  return write_json(out, o) ? 0 : 1;
}

}  // namespace nibble::bench
