// The `nibble bench` command line: every number through nibble::parse_integer / parse_real, so a
// bad value is refused with the option's name, what it got and the range it accepts.
#include "bench_common.hpp"

#include <nibble/parse_number.hpp>

#include <sched.h>

#include <algorithm>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace nibble::bench {
namespace {

static_assert(kSampleSeconds == 0.05, "the usage text says 50 ms");
const char* kUsage =
    "usage: nibble bench [--plugin-dir DIR] [--backend NAME] [--shapes KxN,...] [--m 1,4,...]\n"
    "         [--modes w4a16,w4a8] [--bits 4|8] [--group G] [--threads T,...] [--rounds R]\n"
    "         [--min-seconds S] [--cold-mib MIB] [--burst B] [--no-onednn] [--no-warm]\n"
    "         [--json FILE]\n"
    "         [--baseline NAME|none] [--baseline-max-m M] [--report DIR [--from FILE.json]]\n"
    "         [--moe mixtral,qwen3,deepseek]\n"
    "         [--dispatch [--dispatch-calls N] [--dispatch-seconds S] [--dispatch-gap-us U]]\n"
    "Times the backend's quantized linear kernels against the machine's measured read\n"
    "bandwidth and AMX peaks and against oneDNN's bf16 matmul, interleaved, with cold weights\n"
    "(copies totalling at least twice the L3 cache unless --cold-mib says otherwise). A second\n"
    "backend (npu_ref by default) is timed in the same rounds for M up to --baseline-max-m (64).\n"
    "Each timed sample is --burst (8) back-to-back calls, each on the next cold copy, divided by\n"
    "their count, as a model's layers run, after 1 ms idle (whatever ran before parks its\n"
    "workers) and one untimed call (the sample's own workers are awake); --burst 1 times lone\n"
    "calls after 1 ms idle, which also pay for waking the backend's parked workers. Where a\n"
    "case's first two calls say --burst calls would take over 50 ms, its samples are as many\n"
    "calls as fit in 50 ms (at least one; one is a lone call), marked in the table.\n"
    "A backend whose kernels run on a device (cuda) gets its layers and activations there; each\n"
    "sample waits for the device once, after its last call; the bandwidth is the device's own\n"
    "(a device-to-device copy, read + write) and the dense baseline is the backend's own dense\n"
    "kernel on the bf16 weight (cuBLAS for cuda) instead of oneDNN; --no-onednn turns the dense\n"
    "baseline off.\n"
    "--threads takes one count or a list (1,2,4,8,16): every case runs at each count, with the\n"
    "limits measured at that count; the default is every CPU the process may use. At its end the\n"
    "bench prints the performance targets, evaluated at the highest count, met or not met.\n"
    "--report DIR writes results.json, results.csv, roofline.svg and speedup.svg; with --from it\n"
    "draws them from an earlier --json file without running anything.\n"
    "--moe runs fused MoE layers instead (Mixtral-like: 8 experts, top-2, 4096/14336; Qwen3-like:\n"
    "128, top-8, 2048/768; DeepSeek-like: 64, top-6, 2048/1408) against the bandwidth of the\n"
    "routed experts, the AMX peak, a loop of the backend's linear calls per expert, and a loop of\n"
    "oneDNN bf16 matmuls on the dequantized experts; EXPERTSxTOPKxHIDDENxINTERMEDIATE (e.g.\n"
    "16x4x1024x512) names any other shape.\n"
    "--dispatch times the cost of one call instead: M = 1 on 128x128, 2048x2048 and 4096x4096 and\n"
    "M = 16 on 2048x2048, hot weights, at least --dispatch-calls (2000) calls and\n"
    "--dispatch-seconds (0.5) per layer, median, p10 and p90 per call at each thread count;\n"
    "--dispatch-gap-us idles that long between calls, as the rest of a model would.\n"
    "example: nibble bench --shapes 4096x4096 --m 1,16,256 --threads 1,2,4,8,16 --report out\n";

constexpr int64_t kMaxDim = int64_t(1) << 20;

}  // namespace

std::vector<std::string> split(const std::string& s, char c) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, c))
    if (!item.empty()) out.push_back(item);
  return out;
}

int default_thread_count() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 1;
  return std::max(1, CPU_COUNT(&set));
}

bool parse_options(int argc, char** argv, Options& o, std::string& err) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(a + " needs a value");
      return argv[++i];
    };
    try {
      if (a == "--plugin-dir")
        o.plugin_dir = value();
      else if (a == "--backend")
        o.backend = value();
      else if (a == "--shapes") {
        o.shapes.clear();
        for (auto& s : split(value(), ',')) {
          auto kn = split(s, 'x');
          if (kn.size() != 2) throw std::runtime_error("--shapes: " + s + " is not KxN");
          o.shapes.emplace_back(parse_integer(kn[0], 1, kMaxDim, "--shapes K of " + s),
                                parse_integer(kn[1], 1, kMaxDim, "--shapes N of " + s));
        }
        if (o.shapes.empty()) throw std::runtime_error("--shapes: no shape given");
      } else if (a == "--moe") {
        o.moe = split(value(), ',');
        if (o.moe.empty()) throw std::runtime_error("--moe: no shape given");
      } else if (a == "--m") {
        o.rows.clear();
        for (auto& s : split(value(), ',')) o.rows.push_back(parse_integer(s, 1, kMaxDim, "--m"));
        if (o.rows.empty()) throw std::runtime_error("--m: no row count given");
      } else if (a == "--modes") {
        o.modes = split(value(), ',');
        for (auto& m : o.modes)
          if (m != "w4a16" && m != "w4a8")
            throw std::runtime_error("--modes: " + m + " is not w4a16 or w4a8");
        if (o.modes.empty()) throw std::runtime_error("--modes: no mode given");
      } else if (a == "--bits") {
        const std::string v = value();
        o.bits = int(parse_integer(v, 4, 8, "--bits"));
        if (o.bits != 4 && o.bits != 8)
          throw std::runtime_error("--bits: '" + v + "' is not 4 or 8");
      } else if (a == "--group")
        o.group = int(parse_integer(value(), 1, kMaxDim, "--group"));
      else if (a == "--threads") {
        o.threads.clear();
        for (auto& s : split(value(), ','))
          o.threads.push_back(int(parse_integer(s, 1, 4096, "--threads")));
        if (o.threads.empty()) throw std::runtime_error("--threads: no thread count given");
        std::sort(o.threads.begin(), o.threads.end());
        o.threads.erase(std::unique(o.threads.begin(), o.threads.end()), o.threads.end());
      } else if (a == "--rounds")
        o.rounds = int(parse_integer(value(), 3, 200, "--rounds"));
      else if (a == "--burst")
        o.burst = int(parse_integer(value(), 1, 64, "--burst"));
      else if (a == "--min-seconds")
        o.min_seconds = parse_real(value(), 0, 3600, "--min-seconds");
      else if (a == "--cold-mib")
        o.cold_bytes = size_t(parse_integer(value(), 1, int64_t(1) << 24, "--cold-mib")) << 20;
      else if (a == "--no-onednn")
        o.onednn = false;
      else if (a == "--no-warm")
        o.warm = false;
      else if (a == "--json")
        o.json = value();
      else if (a == "--report")
        o.report = value();
      else if (a == "--from")
        o.from = value();
      else if (a == "--baseline")
        o.baseline = value();
      else if (a == "--baseline-max-m")
        o.baseline_max_m = parse_integer(value(), 0, kMaxDim, "--baseline-max-m");
      else if (a == "--dispatch")
        o.dispatch = true;
      else if (a == "--dispatch-calls")
        o.dispatch_calls = parse_integer(value(), 1, 10000000, "--dispatch-calls");
      else if (a == "--dispatch-seconds")
        o.dispatch_seconds = parse_real(value(), 0, 600, "--dispatch-seconds");
      else if (a == "--dispatch-gap-us")
        o.dispatch_gap_us = parse_integer(value(), 0, 1000000, "--dispatch-gap-us");
      else if (a == "-h" || a == "--help") {
        err = kUsage;
        return false;
      } else {
        throw std::runtime_error("unknown option " + a);
      }
    } catch (const std::exception& e) {
      err = std::string(e.what()) + "\n" + kUsage;
      return false;
    }
  }
  if (o.dispatch && !o.moe.empty()) {
    err = std::string("--dispatch and --moe are two different runs: pick one\n") + kUsage;
    return false;
  }
  if (o.dispatch && !o.report.empty()) {
    err =
        std::string("--report draws linear and MoE runs; --dispatch writes --json only\n") + kUsage;
    return false;
  }
  return true;
}

}  // namespace nibble::bench
