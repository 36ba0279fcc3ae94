// nibble demo: make a small GPTQ and AWQ model (linear layers and one MoE block) with the
// synthetic quantizer, cache it, run every layer on every available backend and numeric mode,
// and print each result's error against float64 and its speed.
#include <nibble/error.hpp>
#include <nibble/log.hpp>
#include <nibble/quantize.hpp>
#include <nibble/runtime.hpp>
#include <nibble/sdk/numeric.hpp>

#include <fmt/core.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <random>

#include "cli_options.hpp"
#include "commands.hpp"

namespace fs = std::filesystem;

namespace {

// Bump when the demo models change, so stale caches are rebuilt.
constexpr const char* kDemoVersion = "v1";

struct DemoModel {
  std::string label;
  nibble::SchemeKind format;
  nibble::QuantizeOptions options;
};

fs::path cache_dir() {
  if (const char* d = std::getenv("NIBBLE_CACHE_DIR"); d && *d) return fs::path(d);
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return fs::path(x) / "nibble";
  if (const char* h = std::getenv("HOME"); h && *h) return fs::path(h) / ".cache" / "nibble";
  return fs::temp_directory_path() / "nibble-cache";
}

std::vector<DemoModel> demo_models() {
  nibble::QuantizeOptions gptq;
  gptq.bits = 4;
  gptq.group_size = 128;
  gptq.sym = true;
  gptq.act_order = true;
  nibble::QuantizeOptions awq;
  awq.bits = 4;
  awq.group_size = 128;
  awq.sym = false;
  return {{"gptq-4bit-g128-actorder", nibble::SchemeKind::GptqV2, gptq},
          {"awq-4bit-g128", nibble::SchemeKind::AwqGemm, awq}};
}

fs::path ensure_model(const DemoModel& m, bool quiet) {
  fs::path dir = cache_dir() / "demo" / kDemoVersion / m.label;
  if (fs::exists(dir / "config.json") && fs::exists(dir / "model.safetensors")) return dir;
  if (!quiet) fmt::print("quantizing the demo model {} into {} ...\n", m.label, dir.string());
  nibble::SyntheticSpec spec;
  spec.layers = {{1024, 1024}, {1024, 2816}, {2816, 1024}};
  spec.moe = nibble::SyntheticMoe{8, 512, 768, 2};
  spec.bias = false;
  spec.seed = 20261129;
  auto model = nibble::make_synthetic_model(spec, m.options, m.format);
  fs::path tmp = dir;
  tmp += ".tmp";
  fs::remove_all(tmp);
  nibble::write_checkpoint(tmp, model, m.format, m.options);
  fs::remove_all(dir);
  fs::rename(tmp, dir);  // appears whole or not at all
  return dir;
}

struct Buffer {
  std::vector<uint64_t> words;
  int64_t shape[2] = {0, 0};
  DLTensor t{};
  Buffer(int64_t rows, int64_t cols, DLDataType dtype) {
    words.assign((size_t(rows * cols) * nibble::sdk::dtype_bytes(dtype) + 7) / 8, 0);
    shape[0] = rows;
    shape[1] = cols;
    t = DLTensor{words.data(), {kDLCPU, 0}, 2, dtype, shape, nullptr, 0};
  }
  double get(size_t i) const { return nibble::sdk::load_float(words.data(), t.dtype, i); }
};

Buffer random_input(int64_t M, int64_t K, uint32_t seed) {
  Buffer b(M, K, nibble::sdk::dtype_bf16());
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (size_t i = 0; i < size_t(M * K); ++i)
    nibble::sdk::store_float(b.words.data(), b.t.dtype, i, nd(rng));
  return b;
}

double rel_error(const std::vector<double>& ref, const Buffer& y) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    double d = y.get(i) - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

// Median seconds of `f` over a few repetitions (after one warm-up).
template <class F>
double median_seconds(F&& f) {
  f();
  std::vector<double> t;
  auto start = std::chrono::steady_clock::now();
  while (t.size() < 5 || (t.size() < 50 && std::chrono::steady_clock::now() - start <
                                               std::chrono::milliseconds(300))) {
    auto a = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

std::vector<double> reference_linear(const nibble::CanonicalWeight& w, const Buffer& x, int64_t M) {
  std::vector<double> wd(size_t(w.N * w.K));
  for (int64_t n = 0; n < w.N; ++n)
    for (int64_t k = 0; k < w.K; ++k) wd[size_t(n * w.K + k)] = w.dequant(n, k);
  std::vector<double> y(size_t(M * w.N));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < w.N; ++n) {
      double acc = w.bias_at(n);
      for (int64_t k = 0; k < w.K; ++k) acc += x.get(size_t(m * w.K + k)) * wd[size_t(n * w.K + k)];
      y[size_t(m * w.N + n)] = acc;
    }
  return y;
}

std::vector<double> reference_moe(const nibble::Checkpoint& ckpt, const std::string& prefix,
                                  const Buffer& x, int64_t M, int top_k,
                                  const std::vector<int32_t>& ids, const std::vector<float>& wts) {
  const int64_t K = x.shape[1];
  std::vector<double> y(size_t(M * K), 0.0);
  std::vector<int> experts(ids.begin(), ids.end());
  std::sort(experts.begin(), experts.end());
  experts.erase(std::unique(experts.begin(), experts.end()), experts.end());
  for (int e : experts) {
    if (e < 0) continue;
    auto [w13, w2] = ckpt.decode_expert(prefix, e);
    const int64_t I = w2.K;
    std::vector<double> h(static_cast<size_t>(I));
    for (int64_t m = 0; m < M; ++m)
      for (int j = 0; j < top_k; ++j) {
        if (ids[size_t(m * top_k + j)] != e) continue;
        for (int64_t i = 0; i < I; ++i) {
          double g = 0, u = 0;
          for (int64_t k = 0; k < K; ++k) {
            double xv = x.get(size_t(m * K + k));
            g += xv * w13.dequant(i, k);
            u += xv * w13.dequant(I + i, k);
          }
          h[size_t(i)] = g / (1 + std::exp(-g)) * u;
        }
        for (int64_t k = 0; k < K; ++k) {
          double acc = 0;
          for (int64_t i = 0; i < I; ++i) acc += h[size_t(i)] * w2.dequant(k, i);
          y[size_t(m * K + k)] += double(wts[size_t(m * top_k + j)]) * acc;
        }
      }
  }
  return y;
}

}  // namespace

int nibble_cmd_demo(int argc, char** argv) {
  auto args = nibble::cli::to_args(argc, argv);
  if (nibble::cli::wants_help(args)) {
    fmt::print(
        "usage: nibble demo [runtime flags]\n\n"
        "Makes a small GPTQ and an AWQ model (three linear layers and one 8-expert MoE\n"
        "block) with the synthetic quantizer, caches it (NIBBLE_CACHE_DIR, else\n"
        "~/.cache/nibble), runs every layer on every available backend and numeric mode,\n"
        "and prints the error against a float64 reference and the time per call.\n\n{}\n"
        "example: nibble demo --threads 2\n",
        nibble::cli::common_flags_help());
    return 0;
  }
  auto flags = nibble::cli::take_common_flags(args);
  bool quiet = false;
  for (const auto& a : args) {
    if (a == "--quiet")
      quiet = true;
    else
      throw nibble::Error("unknown option '" + a + "' (see nibble demo --help)");
  }
  nibble::RuntimeOptions base = nibble::cli::resolve_options(flags);
  nibble::Runtime probe_rt(base);
  std::vector<std::string> backends;
  for (const auto& b : probe_rt.registry().backends())
    if (b.available) backends.push_back(b.name);
  if (backends.empty()) {
    fmt::print(stderr, "no backend is available; see `nibble backends`\n");
    return 1;
  }
  const int64_t M = 16;
  fmt::print("nibble demo: {} backends available ({}); activations bf16, M = {} rows\n",
             backends.size(), fmt::join(backends, ", "), M);
  int failures = 0;
  const std::vector<DemoModel> models = demo_models();
  std::vector<fs::path> dirs;
  for (const DemoModel& dm : models) dirs.push_back(ensure_model(dm, quiet));
  // The table names the kernel that ran; fallback warnings inside a backend would only repeat it.
  nibble::set_log_level(nibble::LogLevel::Error);
  fmt::print("\n{:<26} {:<24} {:<6} {:<26} {:>9} {:>8} {:<4} {:>12}\n", "model", "layer", "mode",
             "backend/kernel", "rel.error", "bound", "", "time/call");
  for (size_t mi = 0; mi < dirs.size(); ++mi) {
    const DemoModel& dm = models[mi];
    auto ckpt = nibble::Checkpoint::open(dirs[mi]);
    for (const std::string& backend : backends) {
      for (nibble::NumericMode mode : {nibble::NumericMode::W4A16, nibble::NumericMode::W4A8}) {
        nibble::RuntimeOptions o = base;
        o.backend = backend;
        o.mode = mode;
        nibble::Runtime rt(o);
        // A result passes when it is within the bound its kernel declares for bf16 inputs.
        auto row = [&](const std::string& layer, const nibble::Placement& p, double err,
                       double secs) {
          double bound = 0;
          for (const auto& k : rt.registry().find(p.backend)->kernels)
            if (k.name == p.kernel) bound = k.bound_bf16;
          bool ok = err <= bound;
          if (!ok) ++failures;
          fmt::print("{:<26} {:<24} {:<6} {:<26} {:>9.2e} {:>8.0e} {:<4} {:>10.1f}us\n", dm.label,
                     layer, nibble::mode_name(mode), p.backend + "/" + p.kernel, err, bound,
                     ok ? "ok" : "FAIL", secs * 1e6);
        };
        // A backend without a kernel for a layer gets one line saying so, not a failure.
        auto refused = [&](const std::string& layer, const nibble::Error& e) {
          if (mode != nibble::NumericMode::W4A16) return;
          std::string why = e.what();
          size_t nl = why.find('\n');
          std::string detail = nl == std::string::npos ? why : why.substr(nl + 3);
          size_t nl2 = detail.find('\n');
          if (nl2 != std::string::npos) detail = detail.substr(0, nl2);
          fmt::print("{:<26} {:<24} {:<6} {:<26} not run: {}\n", dm.label, layer,
                     nibble::mode_name(mode), backend, nl == std::string::npos ? why : detail);
        };
        for (const auto& info : ckpt.linear_layers()) {
          if (info.kind != nibble::LayerKind::Quantized) continue;
          nibble::LinearLayer layer;
          try {
            layer = rt.linear(ckpt, info.prefix);
          } catch (const nibble::Error& e) {
            refused(info.prefix, e);
            continue;
          }
          Buffer x = random_input(M, info.K, 1);
          Buffer y(M, info.N, x.t.dtype);
          layer.forward(x.t, y.t);
          double err = rel_error(reference_linear(ckpt.decode_linear(info.prefix), x, M), y);
          double secs = median_seconds([&] { layer.forward(x.t, y.t); });
          row(info.prefix, layer.placement(), err, secs);
        }
        for (const auto& info : ckpt.moe_blocks()) {
          nibble::MoeLayer moe;
          try {
            moe = rt.moe(ckpt, info.prefix);
          } catch (const nibble::Error& e) {
            refused(info.prefix + " (moe)", e);
            continue;
          }
          Buffer x = random_input(M, info.hidden, 2);
          Buffer y(M, info.hidden, x.t.dtype);
          std::vector<int32_t> ids;
          std::vector<float> wts;
          moe.route(x.t, ids, wts);
          moe.forward(x.t, y.t);
          double err = rel_error(reference_moe(ckpt, info.prefix, x, M, moe.top_k(), ids, wts), y);
          double secs = median_seconds([&] { moe.forward(x.t, y.t); });
          row(info.prefix + " (moe)", moe.placements()[1], err, secs);
        }
      }
    }
  }
  fmt::print(
      "\nrel.error = ‖y − y_ref‖ / ‖y_ref‖ against float64 on the same bf16 inputs "
      "(bf16 output rounding alone gives ~2e-3; w4a8 adds int8 activation rounding).\n");
  if (failures) fmt::print("{} results exceeded their kernel's declared bound\n", failures);
  return failures ? 1 : 0;
}
