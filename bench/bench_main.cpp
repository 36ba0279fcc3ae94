// `nibble bench`: for each thread count of --threads (default: every CPU the process may use),
// layer shape, M and numeric mode, times the backend's linear kernel and oneDNN's bf16 matmul
// interleaved (A B A B …, cold weights rotated over copies totalling ≥ 2× the L3), and between them
// samples the machine's read bandwidth and the AMX peak of the mode's tile type at that thread
// count, so every ratio compares numbers taken seconds apart with the same threads. Prints a
// table per thread count and the targets (targets.hpp) at the end; --json writes it all. A
// device backend is timed on its device against the device's copy bandwidth and its own dense
// kernel (DenseBaseline).
//
// oneDNN runs on OpenMP (libgomp), whose workers spin for GOMP_SPINCOUNT iterations after each
// parallel region unless OMP_WAIT_POLICY=passive was in the environment when libgomp loaded (it
// reads it once, in a constructor, before main). Spinning workers would take the cores from the
// kernel timed next, so the command re-executes itself once with OMP_WAIT_POLICY=passive when
// the user has not set it (a user's own setting is kept).
#include "nibble_bench.hpp"

#include "bench_common.hpp"
#include "device_clock.hpp"
#include "machine_limits.hpp"
#include "onednn_baseline.hpp"
#include "plugin_client.hpp"

#include <nibble/sdk/numeric.hpp>

#include <nlohmann/json.hpp>

#include "report.hpp"
#include "targets.hpp"

#include <strings.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace nibble::bench {
namespace {

std::string default_plugin_dir() {
  if (const char* env = std::getenv("NIBBLE_PLUGIN_PATH"))
    return split(env, ':').empty() ? "" : split(env, ':')[0];
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "";
  std::string exe(buf, size_t(n));
  return exe.substr(0, exe.rfind('/')) + "/../lib/nibble/plugins";
}

// The dense baseline of a case, on the dequantized weight rounded to bf16, cycling over cold
// copies: oneDNN's matmul for a CPU backend; for a device backend its own dense kernel on its
// device (for cuda, cuBLAS), queued like the backend's own calls (the caller waits).
class DenseBaseline {
 public:
  DenseBaseline(const Plugin& plugin, const CanonicalWeight& w, size_t cold, int threads)
      : plugin_(plugin), K_(w.K), N_(w.N), threads_(threads) {
    const std::vector<float> d = dequantized(w);
    const size_t one = size_t(K_ * N_) * 2;
    const size_t copies = std::max<size_t>(2, (cold + one - 1) / one);
    if (!plugin.device()) {
      onednn_ = std::make_unique<OnednnMatmul>(d, K_, N_, int(copies), threads);
      name_ = "oneDNN";
      return;
    }
    std::string why;
    const nibble_kernel* k = plugin.dense_kernel(K_, N_, &why);
    if (!k) {
      std::printf("%lldx%lld: no dense baseline on the device (%s)\n", (long long)K_, (long long)N_,
                  why.c_str());
      return;
    }
    std::vector<uint16_t> bf(d.size());
    for (size_t i = 0; i < d.size(); ++i) bf[i] = sdk::f32_to_bf16(d[i]);
    while (on_device_.size() < copies) on_device_.push_back(plugin.prepare_dense(k, bf, K_, N_));
    name_ = k->name;
  }
  explicit operator bool() const { return onednn_ || !on_device_.empty(); }
  /// "oneDNN" or the backend's dense kernel.
  const std::string& name() const { return name_; }
  bool on_device() const { return !on_device_.empty(); }
  size_t weight_bytes() const {
    return onednn_ ? onednn_->weight_bytes() : on_device_.empty() ? 0 : on_device_[0]->bytes();
  }
  /// y = x · W^T with the next copy; x and y where the backend's layers run. On a device the
  /// call is only queued: Plugin::synchronize waits for it.
  void run(const uint16_t* x, uint16_t* y, int64_t M) {
    if (onednn_) return onednn_->run(int(next_++ % size_t(onednn_->copies())), x, y, M);
    on_device_[next_++ % on_device_.size()]->forward(x, y, M, K_, N_, threads_, ws_);
  }

 private:
  const Plugin& plugin_;
  int64_t K_, N_;
  int threads_;
  std::string name_;
  std::unique_ptr<OnednnMatmul> onednn_;
  std::vector<std::unique_ptr<PreparedLinear>> on_device_;
  sdk::host::Workspace ws_;
  size_t next_ = 0;
};

// The linear bench at one thread count: every shape, mode and M, timed as the header says, with
// the limits sampled at `threads` threads. Cases go to out["cases"], limits to `limits`.
void run_at(const Options& o, int threads, const Plugin& plugin, const Plugin* other,
            const std::vector<CanonicalWeight>& weights, size_t cold, bool amx, nlohmann::json& out,
            RunLimits& run_limits) {
  const int mode_ids[2] = {NIBBLE_MODE_W4A16, NIBBLE_MODE_W4A8};
  // A device backend is held to its device's memory (a device-to-device copy), a CPU backend to
  // the host's read bandwidth.
  std::unique_ptr<BandwidthProbe> bandwidth;
  if (plugin.device())
    bandwidth = std::make_unique<DeviceCopyBandwidth>(plugin.device(),
                                                      std::max<size_t>(cold / 2, size_t(64) << 20));
  else
    bandwidth = std::make_unique<ReadBandwidth>(std::max<size_t>(cold, size_t(512) << 20), threads);
  bandwidth->sample();  // first touch done; warm the page tables
  std::printf("\nthreads %d (limits and the dense baseline at %d threads too)\n", threads, threads);
  const DeviceClock clock(plugin.device());
  if (plugin.device())
    std::printf(
        "on %s: %%BW of its device-to-device copy (read + write); dense baseline: the "
        "backend's own dense kernel on the bf16 weight, on the device; timed on the %s\n",
        sdk::device_name(plugin.device().dl_device()).c_str(), clock.method());
  std::printf("%-12s %5s %-6s %-11s %22s %8s %8s %7s %7s %22s %8s\n", "KxN", "M", "mode", "kernel",
              "median (min-max) us", "GB/s", "TFLOP/s", "%BW", "%peak", "dense bf16 us", "speedup");
  for (const CanonicalWeight& w : weights) {
    const int64_t K = w.K, N = w.N;
    std::unique_ptr<DenseBaseline> dense;
    if (o.onednn) {
      dense = std::make_unique<DenseBaseline>(plugin, w, cold, threads);
      if (!*dense) dense.reset();
    }
    for (const std::string& mode_name : o.modes) {
      const int mode = mode_name == "w4a16" ? mode_ids[0] : mode_ids[1];
      std::string why;
      const nibble_kernel* k = plugin.linear_kernel(w, mode, &why);
      if (!k) {
        std::printf("%lldx%lld %s: no kernel (%s)\n", (long long)K, (long long)N, mode_name.c_str(),
                    why.c_str());
        continue;
      }
      std::vector<std::unique_ptr<PreparedLinear>> layers;
      layers.push_back(plugin.prepare(k, w, mode));
      const size_t layer_bytes = layers[0]->bytes();
      const size_t copies =
          std::max<size_t>(2, (cold + layer_bytes - 1) / std::max<size_t>(1, layer_bytes));
      double prep_s = seconds_of([&] {
        while (layers.size() < copies) layers.push_back(plugin.prepare(k, w, mode));
      });
      const double ckpt_bytes =
          double(K * N) * o.bits / 8 + double(w.num_groups * N) * (2 + o.bits / 8.0);
      // The second backend's layer copies (cold too), for the small-M cases.
      std::vector<std::unique_ptr<PreparedLinear>> ref_layers;
      const nibble_kernel* ref_kernel = other ? other->linear_kernel(w, mode, nullptr) : nullptr;
      if (ref_kernel) {
        ref_layers.push_back(other->prepare(ref_kernel, w, mode));
        const size_t rb = std::max<size_t>(1, ref_layers[0]->bytes());
        const size_t rcopies = std::max<size_t>(2, (cold + rb - 1) / rb);
        while (ref_layers.size() < rcopies)
          ref_layers.push_back(other->prepare(ref_kernel, w, mode));
      }
      sdk::host::Workspace ws, ws_ref;
      for (int64_t M : o.rows) {
        const bool with_ref = ref_kernel && M <= o.baseline_max_m;
        size_t cr = 0;
        std::vector<uint16_t> x = random_bf16(M * K, uint32_t(M));
        std::vector<uint16_t> y(size_t(M * N)), yd(size_t(M * N));
        // x and y where the plugin's layers run (its device, for a device plugin). On a device a
        // call is only queued; a sample's calls are waited for once, after the last, as a
        // model's layers follow each other on a stream (waiting for each call would time the
        // round trip of a launch and a wait instead).
        const LayerMemory xm(plugin, x.data(), x.size() * 2), ym(plugin, y.data(), y.size() * 2),
            ydm(plugin, yd.data(), yd.size() * 2);
        auto run_layer = [&](size_t i) {
          layers[i]->forward(xm.as<uint16_t>(), ym.as<uint16_t>(), M, K, N, threads, ws);
        };
        auto wait = [&] { plugin.synchronize(); };
        size_t ck = 0;
        // The warm-up call. Its own time sizes the samples (for a device backend, whose calls
        // are queued and waited for once per sample, that is the time to queue it).
        auto timed_call = [&] {
          const double t = seconds_of([&] { run_layer(ck++ % copies); });
          wait();
          return t;
        };
        const int calls = sample_calls(o.burst, timed_call(), timed_call);
        auto run_dense = [&] { dense->run(xm.as<uint16_t>(), ydm.as<uint16_t>(), M); };
        if (dense) {
          run_dense();
          wait();
        }
        std::vector<uint16_t> yr(size_t(M * N));
        if (with_ref)
          ref_layers[cr++ % ref_layers.size()]->forward(x.data(), yr.data(), M, K, N, threads,
                                                        ws_ref);
        std::vector<double> tk, td, ratio, tr, ratio_ref, hk, hd;
        // A sample's seconds per call; on a device, the device's events where it has them (then
        // the host's clock, queueing and waiting included, goes to hk / hd as well).
        auto sample = [&](auto&& f, std::vector<double>& host) {
          if (!plugin.device()) return timed_sample(calls, f, wait);
          const SampleSeconds t = clock.sample(calls, f);
          if (clock) host.push_back(t.host);
          return t.reported();
        };
        LimitSamples limits;
        interleaved_rounds(o, threads, *bandwidth, amx, mode, limits, [&] {
          const double a = sample([&] { run_layer(ck++ % copies); }, hk);
          tk.push_back(a);
          if (dense) {
            const double b = sample(run_dense, hd);
            td.push_back(b);
            ratio.push_back(b / a);
          }
          if (with_ref) {
            const double c = timed_sample(calls, [&] {
              ref_layers[cr++ % ref_layers.size()]->forward(x.data(), yr.data(), M, K, N, threads,
                                                            ws_ref);
            });
            tr.push_back(c);
            ratio_ref.push_back(c / a);
          }
        });
        std::vector<double> warm;
        if (o.warm) {
          run_layer(0);
          wait();
          for (int r = 0; r < 5; ++r)
            warm.push_back(seconds_of([&] {
              run_layer(0);
              wait();
            }));
        }
        const Stats sk = stats(tk), sd = stats(td), sr = stats(ratio),
                    sbw = stats(limits.bandwidth), sp = stats(limits.peak), sw = stats(warm);
        run_limits.add(limits, mode);
        const double gbps = double(layer_bytes) / sk.median / 1e9;
        const double tflops = 2.0 * double(M * N * K) / sk.median / 1e12;
        const double r_bw = gbps / sbw.median;
        const double r_peak = amx ? tflops / sp.median : 0;
        std::printf("%5lldx%-6lld %5lld %-6s %-11s %8.1f (%6.1f-%6.1f) %8.1f %8.3f %6.0f%% %6.0f%%",
                    (long long)K, (long long)N, (long long)M, mode_name.c_str(), k->name,
                    sk.median * 1e6, sk.min * 1e6, sk.max * 1e6, gbps, tflops, 100 * r_bw,
                    100 * r_peak);
        if (dense)
          std::printf(" %8.1f (%5.0f-%5.0f) %7.2fx", sd.median * 1e6, sd.min * 1e6, sd.max * 1e6,
                      sr.median);
        else
          std::printf(" %22s %8s", "-", "-");
        if (with_ref)
          std::printf("  %s %.1f us (%.2fx)", o.baseline.c_str(), stats(tr).median * 1e6,
                      stats(ratio_ref).median);
        if (calls < o.burst) std::printf("  [%d calls per sample]", calls);
        std::printf("\n");
        std::fflush(stdout);
        nlohmann::json c;
        c["K"] = K;
        c["N"] = N;
        put_case_identity(c, o, M, threads, mode_name, k->name);
        c["seconds"] = to_json(sk);
        if (!hk.empty()) c["host_seconds"] = to_json(stats(hk));
        c["calls_per_sample"] = calls;
        c["warm_seconds"] = to_json(sw);
        c["weight_bytes"] = layer_bytes;
        c["checkpoint_bytes"] = ckpt_bytes;
        c["weight_copies"] = copies;
        c["prepare_gbps"] = ckpt_bytes * double(copies - 1) / prep_s / 1e9;
        c["weight_gbps"] = gbps;
        c["tflops"] = tflops;
        c["read_gbps"] = to_json(sbw);
        c["ratio_bandwidth"] = r_bw;
        c["bound_seconds"] = double(layer_bytes) / (sbw.median * 1e9);
        if (amx) {
          limits.put_amx(c, mode, tflops);
        }
        if (dense && !dense->on_device()) {
          c["onednn_bf16_seconds"] = to_json(sd);
          c["onednn_weight_bytes"] = dense->weight_bytes();
          c["speedup_onednn"] = to_json(sr);
        } else if (dense) {
          c["dense_kernel"] = dense->name();
          c["dense_bf16_seconds"] = to_json(sd);
          if (!hd.empty()) c["dense_host_seconds"] = to_json(stats(hd));
          c["dense_weight_bytes"] = dense->weight_bytes();
          c["speedup_dense"] = to_json(sr);
        }
        if (plugin.device()) c["device"] = sdk::device_name(plugin.device().dl_device());
        if (with_ref) {
          c["baseline_backend"] = o.baseline;
          c["baseline_kernel"] = ref_kernel->name;
          c["baseline_seconds"] = to_json(stats(tr));
          c["speedup_baseline"] = to_json(stats(ratio_ref));
        }
        out["cases"].push_back(c);
      }
    }
  }
}

}  // namespace

int run_linear(const Options& o) {
  // Packing uses the plugin's thread budget: the most threads of the run.
  Plugin plugin(o.plugin_dir, o.backend, o.threads.back());
  const size_t l3 = l3_bytes();
  const size_t cold = cold_bytes_of(o, l3);
  // The host's AMX peaks say nothing about a device backend.
  const bool amx = amx_usable() && !plugin.device();
  std::printf("backend %s: %s\n", o.backend.c_str(), plugin.probe_detail().c_str());
  std::printf(
      "threads %s, L3 %.0f MiB, cold rotation over >= %.0f MiB of weight copies, %d calls per "
      "sample (fewer where that many take over %.0f ms), AMX peaks %s\n",
      thread_list(o).c_str(), double(l3) / (1 << 20), double(cold) / (1 << 20), o.burst,
      kSampleSeconds * 1e3, amx ? "measured" : "not available");
  // The second backend, when its plugin is there (npu_ref by default).
  std::unique_ptr<Plugin> other;
  if (o.baseline != "none" && o.baseline != o.backend) {
    try {
      other = std::make_unique<Plugin>(o.plugin_dir, o.baseline, o.threads.back());
      std::printf("baseline %s: %s (M <= %lld)\n", o.baseline.c_str(),
                  other->probe_detail().c_str(), (long long)o.baseline_max_m);
    } catch (const std::exception& e) {
      std::printf("baseline %s not used: %s\n", o.baseline.c_str(), e.what());
    }
  }
  std::vector<CanonicalWeight> weights;
  for (auto [K, N] : o.shapes)
    weights.push_back(random_weight(K, N, o.bits, o.group, uint32_t(K * 31 + N)));
  nlohmann::json out = run_header(o, plugin.probe_detail(), l3, cold);
  // read_gbps is then the device's copy bandwidth (read + write), not the host's reads.
  if (plugin.device()) {
    out["device"] = sdk::device_name(plugin.device().dl_device());
    out["timing"] = DeviceClock::method(plugin.device().has_events());
  }
  LimitsByThreads limits;
  for (int threads : o.threads)
    run_at(o, threads, plugin, other.get(), weights, cold, amx, out, limits[threads]);
  return finish_run(out, o, limits, amx);
}

bool write_json(const nlohmann::json& out, const Options& o) {
  if (o.json.empty()) return true;
  std::ofstream f(o.json);
  f << out.dump(2) << "\n";
  if (!f) {
    std::fprintf(stderr, "cannot write %s\n", o.json.c_str());
    return false;
  }
  return true;
}

int finish_run(nlohmann::json& out, const Options& o, const LimitsByThreads& by_threads, bool amx) {
  nlohmann::json per_count = nlohmann::json::array();
  for (const auto& [threads, limits] : by_threads) {
    nlohmann::json l;
    l["threads"] = threads;
    l["read_gbps"] = to_json(stats(limits.bandwidth));
    if (amx) {
      for (const auto& [key, values] :
           {std::pair<const char*, const std::vector<double>*>{"amx_bf16_tflops", &limits.bf16},
            {"amx_int8_tops", &limits.int8},
            {"amx_bf16_loaded_tflops", &limits.bf16_loaded},
            {"amx_int8_loaded_tops", &limits.int8_loaded}})
        if (!values->empty()) l[key] = to_json(stats(*values));
    }
    const Stats b = stats(limits.bandwidth);
    std::printf("\nmachine at %d threads, over the run: %s %.1f GB/s (%.1f-%.1f)", threads,
                out.contains("device") ? "device copy" : "read", b.median, b.min, b.max);
    if (amx) {
      // A peak is measured only where a case of its mode runs (bf16 for W4A16, int8 for W4A8);
      // one that was not is left out of the JSON above and said so here, not printed as 0.
      auto peak = [](const std::vector<double>& v, const char* unit) {
        if (v.empty()) return std::string("not measured (no case of that mode)");
        const Stats p = stats(v);
        char text[96];
        std::snprintf(text, sizeof text, "%.2f %s (%.2f-%.2f)", p.median, unit, p.min, p.max);
        return std::string(text);
      };
      std::printf(", AMX bf16 %s, AMX int8 %s", peak(limits.bf16, "TFLOP/s").c_str(),
                  peak(limits.int8, "TOP/s").c_str());
      std::printf("\n  with operand tile loads (the 2x2 loop a GEMM can run): bf16 %s, int8 %s",
                  peak(limits.bf16_loaded, "TFLOP/s").c_str(),
                  peak(limits.int8_loaded, "TOP/s").c_str());
    }
    std::printf("\n");
    per_count.push_back(l);
  }
  out["limits_by_threads"] = per_count;
  // The top-level limits, the report's roofs, are those of the highest count.
  if (!per_count.empty())
    for (const auto& [key, value] : per_count.back().items())
      if (key != "threads") out[key] = value;
  const nlohmann::json evaluated = evaluate_targets(out);
  out["targets"] = evaluated.at("targets");
  out["targets_skipped"] = evaluated.at("skipped");
  print_targets(evaluated);
  if (!write_json(out, o)) return 1;
  if (!o.report.empty()) {
    write_report(out, o.report);
    std::printf("report written to %s (results.json, results.csv, roofline.svg%s)\n",
                o.report.c_str(),
                out.dump().find("speedup_onednn") != std::string::npos ? ", speedup.svg" : "");
  }
  return 0;
}

}  // namespace nibble::bench

namespace nibble::bench {
namespace {
// OMP_WAIT_POLICY=passive for oneDNN's OpenMP workers (see the header): set it and re-execute.
void ensure_passive_openmp() {
  if (const char* policy = std::getenv("OMP_WAIT_POLICY")) {
    if (strcasecmp(policy, "passive") != 0)
      std::fprintf(stderr,
                   "nibble bench: OMP_WAIT_POLICY=%s kept: oneDNN's OpenMP workers may spin on the "
                   "cores the kernels are timed on\n",
                   policy);
    return;
  }
  std::ifstream f("/proc/self/cmdline", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<std::string> args = split(all, '\0');
  if (args.empty()) return;
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  setenv("OMP_WAIT_POLICY", "passive", 1);
  execv("/proc/self/exe", argv.data());  // returns only on failure: carry on as we are
}
}  // namespace
}  // namespace nibble::bench

int nibble_cmd_bench(int argc, char** argv) {
  nibble::bench::ensure_passive_openmp();
  nibble::bench::Options o;
  std::string err;
  if (!nibble::bench::parse_options(argc, argv, o, err)) {
    std::fprintf(stderr, "%s", err.c_str());
    return err.rfind("usage", 0) == 0 ? 0 : 2;
  }
  if (o.plugin_dir.empty()) o.plugin_dir = nibble::bench::default_plugin_dir();
  if (!o.from.empty()) {
    if (o.report.empty()) {
      std::fprintf(stderr, "nibble bench: --from needs --report DIR\n");
      return 2;
    }
    try {
      std::ifstream f(o.from);
      if (!f) throw std::runtime_error("cannot read " + o.from);
      nibble::bench::write_report(nlohmann::json::parse(f), o.report);
      std::printf("report written to %s\n", o.report.c_str());
      return 0;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "nibble bench: %s: %s\n", o.from.c_str(), e.what());
      return 1;
    }
  }
  try {
    if (o.dispatch) return nibble::bench::run_dispatch(o);
    return o.moe.empty() ? nibble::bench::run_linear(o) : nibble::bench::run_moe(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nibble bench: %s\n", e.what());
    return 1;
  }
}
