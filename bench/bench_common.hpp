// What the linear and the MoE benches share: the command's options and the timing statistics.
#pragma once

#include "machine_limits.hpp"

#include <nibble/sdk/plugin.h>
#include <nibble/sdk/numeric.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace nibble::bench {

/// The number of CPUs this process may run on (its affinity mask), at least 1.
int default_thread_count();

struct Options {
  std::string plugin_dir;
  std::string backend = "cpu_amx";
  std::vector<std::pair<int64_t, int64_t>> shapes = {
      {2048, 2048}, {4096, 4096}, {4096, 14336}, {14336, 4096}};
  std::vector<std::string> moe;  ///< MoE shapes to run instead of linear ones (moe_bench.cpp)
  std::vector<int64_t> rows = {1, 4, 16, 64, 256, 1024};
  std::vector<std::string> modes = {"w4a16", "w4a8"};
  /// Thread counts, ascending and distinct; each runs every case with its own limits. Default:
  /// every CPU the process may run on.
  std::vector<int> threads = {default_thread_count()};
  int bits = 4, group = 128, rounds = 7;
  /// Calls per timed sample, at most: each sample runs this many calls back to back, each on the
  /// next cold copy, and divides (a model's layers run back to back; 1 times lone calls after
  /// the limit probes, which also pay for waking parked workers); fewer for long calls
  /// (sample_calls).
  int burst = 8;
  double min_seconds = 0.3;
  bool dispatch = false;          ///< run the per-call cost probe instead (dispatch_probe.cpp)
  int64_t dispatch_calls = 2000;  ///< the probe's calls per layer, at least
  double dispatch_seconds = 0.5;  ///< and its time per layer, at least
  int64_t dispatch_gap_us = 0;    ///< idle time between the probe's calls (the rest of a model)
  size_t cold_bytes = 0;          // 0: 2 × L3
  bool onednn = true, warm = true;
  std::string baseline = "npu_ref";  ///< a second backend timed in the same rounds ("none": off)
  int64_t baseline_max_m = 64;       ///< reference backends are slow at large M
  std::string json;
  std::string report;  ///< directory for JSON, CSV and SVG charts
  std::string from;    ///< draw the report from this earlier --json file instead of running
};

/// Median, min and max of a sample.
struct Stats {
  double median = 0, min = 0, max = 0;
};
inline Stats stats(std::vector<double> v) {
  Stats s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.min = v.front();
  s.max = v.back();
  s.median = v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
  return s;
}
inline nlohmann::json to_json(const Stats& s) {
  return {{"median", s.median}, {"min", s.min}, {"max", s.max}};
}

/// Wall-clock seconds of one call of f.
template <class F>
double seconds_of(F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// Seconds per call of `calls` back-to-back calls of f, with `finish` (waiting for a device's
/// queued work) run once after the calls and timed with them: calls queued back to back, as a
/// model's layers are, waited for once.
template <class F, class Finish>
double seconds_per_call(int calls, F&& f, Finish&& finish) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < calls; ++i) f();
  finish();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / calls;
}

/// How long a timed sample and the limit probes first wait, idle: long enough for the workers
/// of whatever ran just before (the variant timed before in the round, a limit probe) to stop
/// spinning and park. cpu_amx's workers spin 100 µs after a call by default, oneDNN's are passive
/// under the bench. Without it the variant timed second in a round shared the cores with the first
/// one's spinning workers: the same build against itself at 16 threads read 1.09× slower on
/// average when timed second, up to 1.25× on 2048×2048 (docs/performance.md, Method).
inline constexpr std::chrono::microseconds kQuietGap{1000};

/// One timed sample, in seconds per call: the quiet gap, then (for more than one call) one
/// untimed call of f and `finish`, so the sample starts with its own workers awake as they are
/// between a model's layers, then `calls` back-to-back calls of f and one `finish`, timed. A
/// sample of one call (a lone call) also pays for waking workers that parked.
template <class F, class Finish>
double timed_sample(int calls, F&& f, Finish&& finish) {
  std::this_thread::sleep_for(kQuietGap);
  if (calls > 1) {
    f();
    finish();
  }
  return seconds_per_call(calls, f, finish);
}
template <class F>
double timed_sample(int calls, F&& f) {
  return timed_sample(calls, f, [] {});
}

/// The longest a timed sample's calls take together, about: a case whose call takes longer than
/// this over --burst runs fewer calls per sample (at least one).
inline constexpr double kSampleSeconds = 0.05;

/// Calls per timed sample for a case whose call took `call_seconds`: `burst` (at least 1), or as
/// many as fit kSampleSeconds when fewer, at least 1. Back-to-back calls show what a call's fixed
/// cost (waking and splitting the work, tens of microseconds) adds where it is a visible share of
/// the call; a call of several milliseconds gains nothing from them but time (the MoE bench's
/// large layers at M = 1024 took minutes at a burst of 8).
inline int burst_for(int burst, double call_seconds) {
  burst = std::max(burst, 1);
  if (!(call_seconds > 0)) return burst;  // not measured (or NaN): as asked
  const double fit = kSampleSeconds / call_seconds;
  return fit >= burst ? burst : std::max(1, int(fit));
}

/// Calls per timed sample for a case whose warm-up call took `first_seconds`. The warm-up also
/// pays one-time costs (the workers' start, a workspace growing, lazy loading): where it would cut
/// the burst, `timed_call` (one more call, returning its seconds) decides with the faster of the
/// two, so the count does not hang on one slow call.
template <class TimedCall>
int sample_calls(int burst, double first_seconds, TimedCall&& timed_call) {
  const int calls = burst_for(burst, first_seconds);
  if (calls == burst_for(burst, 0.0)) return calls;  // the whole burst fits
  return burst_for(burst, std::min(first_seconds, timed_call()));
}

/// n normal(0, 1) values rounded to bf16.
inline std::vector<uint16_t> random_bf16(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<uint16_t> v(static_cast<size_t>(n));
  for (auto& x : v) x = sdk::f32_to_bf16(nd(rng));
  return v;
}

/// The machine's limits sampled during one case: read bandwidth, and where AMX is usable the
/// tile peak of the case's numeric mode, register-only and with operand loads.
struct LimitSamples {
  std::vector<double> bandwidth, peak, loaded_peak;
  /// A case's AMX fields in its JSON: the mode's peak and loaded peak, and the ratios of the
  /// case's `tflops` to them.
  void put_amx(nlohmann::json& c, int mode, double tflops) const {
    const bool bf = mode == NIBBLE_MODE_W4A16;
    const Stats p = stats(peak), l = stats(loaded_peak);
    c[bf ? "amx_bf16_tflops" : "amx_int8_tops"] = to_json(p);
    c[bf ? "amx_bf16_loaded_tflops" : "amx_int8_loaded_tops"] = to_json(l);
    c["ratio_peak"] = tflops / p.median;
    c["ratio_loaded_peak"] = tflops / l.median;
  }
};

/// Runs `round()` at least o.rounds times and for at least o.min_seconds (200 rounds at most),
/// and after every other round samples the machine's limits on `threads` threads into `limits`:
/// they are measured seconds apart from the timings they divide.
template <class Round>
void interleaved_rounds(const Options& o, int threads, const BandwidthProbe& bandwidth, bool amx,
                        int mode, LimitSamples& limits, Round&& round) {
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  const bool bf16 = mode == NIBBLE_MODE_W4A16;
  for (int r = 0; r < 200 && (r < o.rounds || elapsed() < o.min_seconds); ++r) {
    round();
    if (r % 2 == 0) {
      std::this_thread::sleep_for(kQuietGap);  // the round's workers park before the probes run
      limits.bandwidth.push_back(bandwidth.sample());
      if (amx) {
        limits.peak.push_back(bf16 ? amx_bf16_peak(threads, 0.01) : amx_int8_peak(threads, 0.01));
        limits.loaded_peak.push_back(bf16 ? amx_bf16_loaded_peak(threads, 0.01)
                                          : amx_int8_loaded_peak(threads, 0.01));
      }
    }
  }
}

/// Every limit sample at one thread count of a run, per AMX tile type, for the summary at its end.
struct RunLimits {
  std::vector<double> bandwidth, bf16, int8, bf16_loaded, int8_loaded;
  /// Add one case's samples (its peaks are of the case's mode).
  void add(const LimitSamples& s, int mode) {
    const bool bf = mode == NIBBLE_MODE_W4A16;
    bandwidth.insert(bandwidth.end(), s.bandwidth.begin(), s.bandwidth.end());
    auto& p = bf ? bf16 : int8;
    p.insert(p.end(), s.peak.begin(), s.peak.end());
    auto& l = bf ? bf16_loaded : int8_loaded;
    l.insert(l.end(), s.loaded_peak.begin(), s.loaded_peak.end());
  }
};

/// The limits of a run per thread count.
using LimitsByThreads = std::map<int, RunLimits>;

/// The JSON of a run before its cases: backend, probe, thread counts (`threads` the highest),
/// cache and cold-rotation sizes.
inline nlohmann::json run_header(const Options& o, const std::string& probe, size_t l3,
                                 size_t cold) {
  nlohmann::json out;
  out["backend"] = o.backend;
  out["probe"] = probe;
  out["threads"] = o.threads.back();
  out["thread_counts"] = o.threads;
  out["l3_bytes"] = l3;
  out["cold_bytes"] = cold;
  out["calls_per_sample"] = o.burst;  // at most; each case records its own (sample_calls)
  out["cases"] = nlohmann::json::array();
  return out;
}

/// What every case of a run records about itself: rows, threads, bits, group size, numeric mode,
/// backend and kernel.
inline void put_case_identity(nlohmann::json& c, const Options& o, int64_t M, int threads,
                              const std::string& mode, const char* kernel) {
  c["M"] = M;
  c["threads"] = threads;
  c["bits"] = o.bits;
  c["group_size"] = o.group;
  c["mode"] = mode;
  c["backend"] = o.backend;
  c["kernel"] = kernel;
}

/// The end of a run: the machine's limits per thread count into `out` and on stdout (the
/// top-level limits are those of the highest count), the targets (targets.hpp), then the JSON
/// file and the report when the options ask for them. Returns the process exit code.
int finish_run(nlohmann::json& out, const Options& o, const LimitsByThreads& limits, bool amx);

/// Write `out` to o.json when it is set; false (after saying so on stderr) when it cannot.
bool write_json(const nlohmann::json& out, const Options& o);

/// Parse the bench's command line into `o`. False with `err` set: the usage text (for --help,
/// which starts with "usage") or the problem followed by the usage text.
bool parse_options(int argc, char** argv, Options& o, std::string& err);

/// The non-empty items of `s` between separators `c` ("a,,b" gives a and b).
std::vector<std::string> split(const std::string& s, char c);

/// The cold-rotation size of a run: --cold-mib, or twice the L3 and at least 256 MiB.
/// The run's thread counts as the user writes them: "1,2,16".
inline std::string thread_list(const Options& o) {
  std::string out;
  for (int t : o.threads) out += (out.empty() ? "" : ",") + std::to_string(t);
  return out;
}

inline size_t cold_bytes_of(const Options& o, size_t l3) {
  return o.cold_bytes ? o.cold_bytes : std::max<size_t>(2 * l3, size_t(256) << 20);
}

/// The linear bench (bench_main.cpp).
int run_linear(const Options& o);

/// The MoE bench (moe_bench.cpp): o.moe names the shapes.
int run_moe(const Options& o);

/// The per-call cost probe (dispatch_probe.cpp).
int run_dispatch(const Options& o);

}  // namespace nibble::bench
