// nibble demo: make a small GPTQ and AWQ model (linear layers and one MoE block) with the
// synthetic quantizer, cache it, run every layer on every available backend and numeric mode,
// and print each result's error against float64 and its speed. A device backend's layers run on
// copies of their tensors on its device (layer_io.hpp).
#include <nibble/conformance/reference.hpp>
#include <nibble/error.hpp>
#include <nibble/log.hpp>
#include <nibble/quantize.hpp>
#include <nibble/runtime.hpp>
#include <nibble/sdk/numeric.hpp>
#include <nibble/untrusted_text.hpp>

#include <fmt/core.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <random>

#include "cli_options.hpp"
#include "commands.hpp"
#include "layer_io.hpp"
#include "progress.hpp"

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

fs::path ensure_model(const DemoModel& m, nibble::cli::Progress& progress) {
  fs::path dir = cache_dir() / "demo" / kDemoVersion / m.label;
  if (fs::exists(dir / "config.json") && fs::exists(dir / "model.safetensors")) {
    progress.step(m.label + " (cached)");
    return dir;
  }
  progress.step("quantizing " + m.label + " into " + dir.string());
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
  std::vector<double> values() const {
    std::vector<double> v(size_t(shape[0] * shape[1]));
    for (size_t i = 0; i < v.size(); ++i) v[i] = get(i);
    return v;
  }
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

// Median seconds of f and g timed alternately (f g f g ...): both see the same machine state,
// which on shared hosts changes from second to second.
template <class F, class G>
std::pair<double, double> paired_median_seconds(F&& f, G&& g) {
  f();
  g();
  std::vector<double> tf, tg;
  auto start = std::chrono::steady_clock::now();
  auto time = [](auto& fn) {
    auto a = std::chrono::steady_clock::now();
    fn();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
  };
  while (tf.size() < 5 || (tf.size() < 50 && std::chrono::steady_clock::now() - start <
                                                 std::chrono::milliseconds(400))) {
    tf.push_back(time(f));
    tg.push_back(time(g));
  }
  std::sort(tf.begin(), tf.end());
  std::sort(tg.begin(), tg.end());
  return {tf[tf.size() / 2], tg[tg.size() / 2]};
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

// One measured layer: its error against float64 and its time, and the same layer dense in bf16
// on oneDNN (through cpu_amx's dense kernel) when that kernel is available.
struct Result {
  std::string model = {}, layer = {}, mode = {}, backend = {}, kernel = {};
  double error = 0, bound = 0, seconds = 0, onednn_seconds = 0;
  bool ok = true;
  std::string not_run = {};
};

// The dequantized weight in bf16, as a dense layer a oneDNN kernel can run: the baseline a user
// would otherwise use.
std::optional<nibble::LinearLayer> onednn_baseline(const nibble::RuntimeOptions& base,
                                                   const nibble::CanonicalWeight& w,
                                                   const std::string& name) {
  nibble::RuntimeOptions o = base;
  o.backend = "cpu_amx";
  nibble::Runtime rt(o);
  const nibble::BackendInfo* b = rt.registry().find("cpu_amx");
  if (!b || !b->available) return std::nullopt;
  std::vector<uint16_t> bf16(size_t(w.N * w.K));
  for (int64_t n = 0; n < w.N; ++n)
    for (int64_t k = 0; k < w.K; ++k)
      bf16[size_t(n * w.K + k)] = nibble::sdk::f32_to_bf16(float(w.dequant(n, k)));
  nibble_dense_weight dw{};
  dw.struct_size = sizeof dw;
  dw.K = w.K;
  dw.N = w.N;
  dw.data = bf16.data();
  dw.dtype = nibble::sdk::dtype_bf16();
  try {
    return rt.dense(name + " (bf16 dense)", dw);  // the plugin copies the weight at prepare
  } catch (const nibble::Error&) {
    return std::nullopt;
  }
}

}  // namespace

int nibble_cmd_demo(int argc, char** argv) {
  auto args = nibble::cli::to_args(argc, argv);
  if (nibble::cli::wants_help(args)) {
    fmt::print(
        "usage: nibble demo [--model DIR] [--quiet] [--json] [runtime flags]\n\n"
        "Without --model: makes a small GPTQ and an AWQ model (three linear layers and one\n"
        "8-expert MoE block) with the synthetic quantizer, caches them (NIBBLE_CACHE_DIR,\n"
        "else ~/.cache/nibble), runs every layer on every available backend and numeric\n"
        "mode, and prints each layer's kernel, error against a float64 reference and time\n"
        "per call, then how each backend compares with oneDNN's bf16 matmul on the same\n"
        "linear layers. With --model DIR it does the same on your checkpoint.\n\n{}\n"
        "examples:\n  nibble demo\n  nibble demo --model ./Qwen3-0.6B-GPTQ --backend cpu_amx "
        "--json\n",
        nibble::cli::common_flags_help());
    return 0;
  }
  auto flags = nibble::cli::take_common_flags(args);
  bool quiet = false, json = false;
  std::string user_model;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--quiet")
      quiet = true;
    else if (args[i] == "--json")
      json = true;
    else if (args[i] == "--model" && i + 1 < args.size())
      user_model = args[++i];
    else
      throw nibble::Error("unknown option " + nibble::quoted_untrusted(args[i]) +
                          " (see nibble demo --help)");
  }
  nibble::RuntimeOptions base = nibble::cli::resolve_options(flags);
  nibble::Runtime probe_rt(base);
  std::vector<std::string> backends;
  for (const auto& b : probe_rt.registry().backends())
    if (b.available && (flags.backend.empty() || base.backend == "auto" || b.name == base.backend))
      backends.push_back(b.name);
  if (backends.empty()) {
    fmt::print(stderr, "no backend is available; see `nibble backends`\n");
    return 1;
  }
  const int64_t M = 16;

  std::vector<std::pair<std::string, fs::path>> models;
  if (!user_model.empty()) {
    models.emplace_back(fs::path(user_model).filename().string(), fs::path(user_model));
  } else {
    auto demo = demo_models();
    nibble::cli::Progress progress("demo models", int(demo.size()), quiet);
    for (const DemoModel& dm : demo) models.emplace_back(dm.label, ensure_model(dm, progress));
  }
  // The table names the kernel that ran; fallback warnings inside a backend would only repeat it.
  nibble::set_log_level(nibble::LogLevel::Error);

  std::vector<Result> results;
  for (const auto& [label, dir] : models) {
    auto ckpt = nibble::Checkpoint::open(dir);
    int quantized = 0;
    for (const auto& info : ckpt.linear_layers())
      quantized += info.kind == nibble::LayerKind::Quantized;
    const int steps = int(backends.size()) * 2 * (quantized + int(ckpt.moe_blocks().size()));
    nibble::cli::Progress progress("running " + label, steps, quiet);
    // oneDNN baselines per layer, prepared once per model and timed beside each backend.
    std::map<std::string, std::optional<nibble::LinearLayer>> onednn;
    for (const std::string& backend : backends) {
      for (nibble::NumericMode mode : {nibble::NumericMode::W4A16, nibble::NumericMode::W4A8}) {
        nibble::RuntimeOptions o = base;
        o.backend = backend;
        o.mode = mode;
        nibble::Runtime rt(o);
        auto bound_of = [&](const nibble::Placement& p) {
          for (const auto& k : rt.registry().find(p.backend)->kernels)
            if (k.name == p.kernel) return k.bound_bf16;
          return 0.0;
        };
        auto not_run = [&](const std::string& layer, const nibble::Error& e) {
          Result r{label, layer, nibble::mode_name(mode), backend};
          std::string why = e.what();
          // The first reason line is the useful one ("backend X has no MoE kernel ...").
          size_t nl = why.find('\n');
          if (nl != std::string::npos) {
            std::string rest = why.substr(nl + 1);
            size_t a = rest.find_first_not_of(' ');
            why = rest.substr(a == std::string::npos ? 0 : a,
                              rest.find('\n') - (a == std::string::npos ? 0 : a));
          }
          r.not_run = why;
          if (mode == nibble::NumericMode::W4A16)
            results.push_back(r);  // a missing mode is no news
        };
        for (const auto& info : ckpt.linear_layers()) {
          if (info.kind != nibble::LayerKind::Quantized) continue;
          progress.step(backend + " " + nibble::mode_name(mode) + " " + info.prefix);
          nibble::LinearLayer layer;
          try {
            layer = rt.linear(ckpt, info.prefix);
          } catch (const nibble::Error& e) {
            not_run(info.prefix, e);
            continue;
          }
          Buffer x = random_input(M, info.K, 1);
          Buffer y(M, info.N, x.t.dtype);
          nibble::cli::LayerIo io(layer.device_memory(), x.t, y.t);
          layer.forward(io.x(), io.y());
          io.finish();
          auto run = [&] {
            layer.forward(io.x(), io.y());
            io.wait();
          };
          auto w = ckpt.decode_linear(info.prefix);
          Result r{label, info.prefix, nibble::mode_name(mode), backend, layer.placement().kernel};
          r.error = rel_error(nibble::conformance::reference_linear(w, x.values(), M), y);
          r.bound = bound_of(layer.placement());
          r.ok = r.error <= r.bound;
          if (!onednn.count(info.prefix))
            onednn.emplace(info.prefix, onednn_baseline(base, w, info.prefix));
          if (auto& dense = onednn.at(info.prefix)) {
            Buffer yd(M, info.N, x.t.dtype);
            std::tie(r.seconds, r.onednn_seconds) =
                paired_median_seconds(run, [&] { dense->forward(x.t, yd.t); });
          } else {
            r.seconds = median_seconds(run);
          }
          results.push_back(r);
        }
        for (const auto& info : ckpt.moe_blocks()) {
          progress.step(backend + " " + nibble::mode_name(mode) + " " + info.prefix);
          nibble::MoeLayer moe;
          try {
            moe = rt.moe(ckpt, info.prefix);
          } catch (const nibble::Error& e) {
            not_run(info.prefix + " (moe)", e);
            continue;
          }
          Buffer x = random_input(M, info.hidden, 2);
          Buffer y(M, info.hidden, x.t.dtype);
          std::vector<int32_t> ids;
          std::vector<float> wts;
          nibble::cli::LayerIo io(moe.device_memory(), x.t, y.t);
          moe.route(io.x(), ids, wts);
          moe.forward(io.x(), io.y());
          io.finish();
          Result r{label, info.prefix + " (moe)", nibble::mode_name(mode), backend,
                   moe.placements()[1].kernel};
          r.error = rel_error(reference_moe(ckpt, info.prefix, x, M, moe.top_k(), ids, wts), y);
          r.bound = bound_of(moe.placements()[1]);
          r.ok = r.error <= r.bound;
          r.seconds = median_seconds([&] {
            moe.forward(io.x(), io.y());
            io.wait();
          });
          results.push_back(r);
        }
      }
    }
  }

  int failures = 0;
  for (const auto& r : results) failures += r.not_run.empty() && !r.ok;
  // Per backend and mode: the geometric mean of oneDNN time / our time over the linear layers.
  std::map<std::string, std::pair<double, int>> speedup;
  for (const auto& r : results)
    if (r.not_run.empty() && r.onednn_seconds > 0 && r.seconds > 0) {
      auto& s = speedup[r.backend + " " + r.mode];
      s.first += std::log(r.onednn_seconds / r.seconds);
      ++s.second;
    }

  if (json) {
    nlohmann::json j;
    j["rows"] = M;
    j["activations"] = "bf16";
    j["results"] = nlohmann::json::array();
    for (const auto& r : results) {
      nlohmann::json e = {
          {"model", r.model}, {"layer", r.layer}, {"mode", r.mode}, {"backend", r.backend}};
      if (!r.not_run.empty()) {
        e["not_run"] = r.not_run;
      } else {
        e.update({{"kernel", r.kernel},
                  {"relative_error", r.error},
                  {"bound", r.bound},
                  {"within_bound", r.ok},
                  {"seconds", r.seconds}});
        if (r.onednn_seconds > 0) e["onednn_bf16_seconds"] = r.onednn_seconds;
      }
      j["results"].push_back(e);
    }
    j["speedup_over_onednn_bf16"] = nlohmann::json::object();
    for (const auto& [k, v] : speedup)
      j["speedup_over_onednn_bf16"][k] = std::exp(v.first / v.second);
    fmt::print("{}\n", j.dump(2));
    return failures ? 1 : 0;
  }

  fmt::print("nibble demo: {} ({}); activations bf16, M = {} rows\n\n",
             backends.size() == 1 ? "1 backend" : fmt::format("{} backends", backends.size()),
             fmt::join(backends, ", "), M);
  fmt::print("{:<24} {:<24} {:<6} {:<26} {:>9} {:>8} {:<4} {:>11} {:>10}\n", "model", "layer",
             "mode", "backend/kernel", "rel.error", "bound", "", "time/call", "vs oneDNN");
  for (const auto& r : results) {
    if (!r.not_run.empty()) {
      fmt::print("{:<24} {:<24} {:<6} {:<26} not run: {}\n", r.model, r.layer, r.mode, r.backend,
                 r.not_run);
      continue;
    }
    std::string vs =
        r.onednn_seconds > 0 ? fmt::format("{:.2f}x", r.onednn_seconds / r.seconds) : "-";
    fmt::print("{:<24} {:<24} {:<6} {:<26} {:>9.2e} {:>8.0e} {:<4} {:>9.1f}us {:>10}\n", r.model,
               r.layer, r.mode, r.backend + "/" + r.kernel, r.error, r.bound, r.ok ? "ok" : "FAIL",
               r.seconds * 1e6, vs);
  }
  fmt::print("\n");
  for (const auto& [k, v] : speedup) {
    double g = std::exp(v.first / v.second);
    fmt::print(
        "{:<14} {} oneDNN's bf16 matmul on the same {} linear layers (geometric mean, M = {})\n", k,
        g >= 1 ? fmt::format("{:.2f}x faster than", g) : fmt::format("{:.2f}x slower than", 1 / g),
        v.second, M);
  }
  fmt::print(
      "\nrel.error = ‖y − y_ref‖ / ‖y_ref‖ against float64 on the same bf16 inputs; bound = "
      "what the kernel declares. oneDNN runs the dequantized weight in bf16.\n");
  if (failures) fmt::print("{} results exceeded their kernel's declared bound\n", failures);
  return failures ? 1 : 0;
}
