// nibble-cuda-bench: the cuda backend's kernels timed on the GPU against cuBLAS in the same run.
// Linear layers (4-bit, group 128, bf16 activations): the Marlin kernels launched directly on
// weights rotated over enough copies to come from HBM (≥ 16, ≥ 4× the L2), CUDA events around
// `iters` calls on one stream, and cuBLAS bf16 GEMM on the dequantized weight, rotated the same
// way; small M reported as % of HBM bandwidth, every M as the ratio to cuBLAS. The fused MoE
// (Mixtral-like: 8 experts, top-2, K 4096, I 14336) runs through the plugin's C ABI with tensors
// from its own device memory. Writes JSON with --json.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <nibble/sdk/host.hpp>
#include <nibble/sdk/numeric.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "dequant_gemm.hpp"
#include "marlin_weight.hpp"
#include "timing.hpp"

namespace nibble::cuda::bench {
namespace {

struct Options {
  std::vector<std::pair<int64_t, int64_t>> shapes = {{4096, 4096}, {4096, 14336}, {14336, 4096}};
  std::vector<int64_t> ms = {1, 4, 16, 32, 64, 128, 256, 1024};
  int iters = 200;
  double peak_tbs = 0;  // the % of peak's divisor; 0: the device's nominal bandwidth
  bool sweep = false, moe = true, linear = true;
  MoeBenchShape moe_shape;
  int tile_rows = 0;      // the small-M kernel's rows per tile (8 or 16); 0: its own choice
  int weights_as_a = -1;  // its 16-row tiles' A operand: 1 the weight, 0 the rows; -1: its own
  bool overlap = true;    // the small-M kernel may start while the previous call finishes
  // Calls on the legacy default stream instead of a stream of their own.
  bool legacy_stream = false;
  // The linear layers' weights have zero points (AWQ's kind) instead of none.
  bool asymmetric = false;
  int weight_ring = -1;  // the small-M kernel's weight ring (0 registers, 2-6 batches); -1: its own
  int wgmma_tma = -1;    // the warpgroup kernel's copies: 1 TMA, 0 cp.async; -1: its own choice
  std::string json, plugin = std::string(NIBBLE_PLUGIN_BUILD_DIR) + "/libnibble_cuda.so";
};

std::vector<int64_t> int_list(const std::string& s) {
  std::vector<int64_t> v;
  size_t i = 0;
  while (i < s.size()) {
    size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    v.push_back(std::stoll(s.substr(i, j - i)));
    i = j + 1;
  }
  return v;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(a + " needs a value");
      return argv[++i];
    };
    if (a == "--json")
      o.json = value();
    else if (a == "--iters")
      o.iters = int(std::stoi(value()));
    else if (a == "--m")
      o.ms = int_list(value());
    else if (a == "--peak-tbs")
      o.peak_tbs = std::stod(value());
    else if (a == "--plugin")
      o.plugin = value();
    else if (a == "--sweep")
      o.sweep = true;
    else if (a == "--tile-rows") {
      o.tile_rows = int(std::stoi(value()));
      if (o.tile_rows != 8 && o.tile_rows != 16)
        throw std::runtime_error("--tile-rows takes 8 or 16, not " + std::to_string(o.tile_rows));
    } else if (a == "--weights-as-a") {
      o.weights_as_a = int(std::stoi(value()));
      if (o.weights_as_a != 0 && o.weights_as_a != 1)
        throw std::runtime_error("--weights-as-a takes 0 or 1, not " +
                                 std::to_string(o.weights_as_a));
    } else if (a == "--no-overlap")
      o.overlap = false;
    else if (a == "--legacy-stream")
      o.legacy_stream = true;
    else if (a == "--asymmetric")
      o.asymmetric = true;
    else if (a == "--weight-ring") {
      o.weight_ring = int(std::stoi(value()));
      if (o.weight_ring < 0 || o.weight_ring == 1 || o.weight_ring > kStreamMaxRing)
        throw std::runtime_error("--weight-ring takes 0 or 2-" + std::to_string(kStreamMaxRing) +
                                 ", not " + std::to_string(o.weight_ring));
    } else if (a == "--wgmma-tma") {
      o.wgmma_tma = int(std::stoi(value()));
      if (o.wgmma_tma != 0 && o.wgmma_tma != 1)
        throw std::runtime_error("--wgmma-tma takes 0 or 1, not " + std::to_string(o.wgmma_tma));
    } else if (a == "--moe-shape") {
      const std::vector<int64_t> v = int_list(value());
      if (v.size() != 4 || v[0] < 1 || v[0] > 4096 || v[1] < 1 || v[1] > v[0] || v[2] < 1 ||
          v[3] < 1)
        throw std::runtime_error(
            "--moe-shape takes experts,top_k,K,I with 1 <= top_k <= experts <= 4096 (e.g. "
            "128,8,2048,768)");
      o.moe_shape = {int(v[0]), int(v[1]), v[2], v[3]};
    } else if (a == "--no-moe")
      o.moe = false;
    else if (a == "--moe-only")
      o.linear = false;
    else if (a == "--shapes") {
      o.shapes.clear();
      for (const std::string& s : {value()}) {
        size_t i0 = 0;
        while (i0 < s.size()) {
          size_t j = s.find(',', i0);
          if (j == std::string::npos) j = s.size();
          const std::string kn = s.substr(i0, j - i0);
          const size_t x = kn.find('x');
          o.shapes.push_back({std::stoll(kn.substr(0, x)), std::stoll(kn.substr(x + 1))});
          i0 = j + 1;
        }
      }
    } else {
      throw std::runtime_error(
          "unknown option " + a +
          " (--json F --iters N --m 1,16 --shapes KxN,... --sweep --tile-rows 8|16 "
          "--weights-as-a 0|1 --no-overlap "
          "--legacy-stream --asymmetric --weight-ring 0|2-6 --wgmma-tma 0|1 "
          "--no-moe --moe-only --moe-shape E,TOPK,K,I --peak-tbs T --plugin PATH)");
    }
  }
  return o;
}

// A random 4-bit group-128 weight K × N with f16 scales, owned: symmetric (every zero point 8,
// which the packer leaves out), or with random zero points (`asymmetric`, as AWQ's are).
struct HostWeight {
  std::vector<uint8_t> q, zeros;
  std::vector<uint16_t> scales;
  nibble_canonical_weight c{};
  HostWeight(int64_t K, int64_t N, uint32_t seed, bool asymmetric) {
    std::mt19937 rng(seed);
    const int64_t G = K / 128;
    q.resize(size_t(K * N));
    for (auto& v : q) v = uint8_t(rng() & 15);
    zeros.assign(size_t(G * N), 8);
    if (asymmetric)
      for (auto& z : zeros) z = uint8_t(rng() & 15);
    scales.resize(size_t(G * N));
    std::uniform_real_distribution<float> u(0.5f, 1.5f);
    for (auto& s : scales) s = sdk::f32_to_f16(u(rng) / (15.f * std::sqrt(float(K))));
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
  // The dequantized weight [N][K] in bf16 (cuBLAS's operand).
  std::vector<uint16_t> dense_bf16() const {
    std::vector<uint16_t> d(q.size());
    for (int64_t n = 0; n < c.N; ++n)
      for (int64_t k = 0; k < c.K; ++k) {
        const float s = sdk::f16_to_f32(scales[size_t((k / 128) * c.N + n)]);
        const float z = float(zeros[size_t((k / 128) * c.N + n)]);
        d[size_t(n * c.K + k)] = sdk::f32_to_bf16((float(q[size_t(n * c.K + k)]) - z) * s);
      }
    return d;
  }
};

nlohmann::json run_linear(const Options& o, const Device& dev, cublasHandle_t blas) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& [K, N] : o.shapes) {
    HostWeight w(K, N, uint32_t(K * 7 + N), o.asymmetric);
    const MarlinHost host = pack_marlin(sdk::QuantWeight(w.c, "bench"), false, "bench");
    const size_t qbytes =
        host.packed.qweight.size() * 4 + host.scales.size() + host.packed.zeros.size() * 4;
    const int copies = int(std::max<size_t>(16, (4 * dev.l2_bytes + qbytes - 1) / qbytes));
    MarlinStack stack(0, copies, host);
    for (int i = 1; i < copies; ++i) stack.put(i, host, "bench copy");
    const std::vector<uint16_t> dense = w.dense_bf16();
    const size_t dbytes = dense.size() * 2;
    const int dcopies = int(std::max<size_t>(16, (4 * dev.l2_bytes + dbytes - 1) / dbytes));
    DeviceArray dw(dbytes * size_t(dcopies));
    for (int i = 0; i < dcopies; ++i)
      check_cuda(
          cudaMemcpy(dw.at(dbytes * size_t(i)), dense.data(), dbytes, cudaMemcpyHostToDevice),
          "upload dense");
    std::printf(
        "\n%lld x %lld (K x N), 4-bit g128: %.1f MB packed x %d copies, bf16 %.1f MB x %d\n",
        (long long)K, (long long)N, qbytes / 1e6, copies, dbytes / 1e6, dcopies);
    std::printf("%6s %10s %10s %8s %10s %8s\n", "M", "nibble us", "cuBLAS us", "x cuBLAS", "TB/s",
                "% HBM");
    for (int64_t M : o.ms) {
      std::vector<uint16_t> xh(size_t(M * K));
      std::mt19937 rng{uint32_t(M)};
      std::normal_distribution<float> nd(0.f, 1.f);
      for (auto& v : xh) v = sdk::f32_to_bf16(nd(rng));
      DeviceArray x(xh.size() * 2), y(size_t(M * N) * 2);
      check_cuda(cudaMemcpy(x.get(), xh.data(), xh.size() * 2, cudaMemcpyHostToDevice), "x");
      GemmArgs a;
      a.x = x.get();
      a.ldx = K;
      a.x_dtype = DType::bf16;
      a.y = y.get();
      a.ldy = N;
      a.y_dtype = DType::bf16;
      a.M = M;
      auto view = [&](int i) {
        MarlinDevice v = stack.view();
        v.qweight += int64_t(i) * v.expert_qweight;
        v.scales = static_cast<const char*>(v.scales) + int64_t(i) * v.expert_scales * 2;
        v.slab_groups += int64_t(i) * v.expert_slabs;
        return v;
      };
      // The large-M path as the plugin runs it, with scratch for its largest plan.
      a.w = view(0);
      const bool has_wgmma = wgmma_available();
      const WgmmaFit fit = has_wgmma ? wgmma_fit() : WgmmaFit{};
      const LargeM large = choose_large_m(a, has_wgmma ? &fit : nullptr, true);
      const bool dequant = large == LargeM::dequant_gemm;
      size_t scratch_bytes = plan_dequant_gemm(a).scratch_bytes();
      for (int64_t c : {int64_t(64), int64_t(N)})
        scratch_bytes = std::max(scratch_bytes, plan_dequant_gemm(a, c).scratch_bytes());
      DeviceArray scratch(scratch_bytes);
      auto dequant_gemm = [&](int i, const DequantGemmPlan& plan) {
        a.w = view(i % copies);
        const std::string failed = run_dequant_gemm(a, plan, blas, scratch.get(), dev.stream);
        if (!failed.empty()) throw std::runtime_error(failed);
      };
      const Timing tm = time_calls(o.iters, dev.stream, [&](int i) {
        a.w = view(i % copies);
        if (dequant) {
          dequant_gemm(i, plan_dequant_gemm(a));
        } else if (large == LargeM::wgmma) {
          WgmmaConfig c;
          if (o.wgmma_tma >= 0) {
            c = choose_wgmma_config(a, fit);
            c.tma = o.wgmma_tma == 1;
          }
          check_cuda(launch_marlin_wgmma(a, c, dev.stream), "launch_marlin_wgmma");
        } else if ((o.tile_rows != 0 || o.weights_as_a >= 0 || !o.overlap || o.weight_ring >= 0) &&
                   !(M > 64 && tiled_takes(a))) {
          StreamConfig c = choose_stream_config(a, dev.sms);
          if (o.tile_rows != 0) c.tile_rows = o.tile_rows;
          if (o.weights_as_a >= 0 && c.tile_rows != 8) c.weights_as_a = o.weights_as_a;
          c.overlap_previous = o.overlap;
          c.weight_ring = o.weight_ring;
          check_cuda(launch_marlin_stream(a, c, dev.stream), "launch_marlin_stream");
        } else {
          check_cuda(launch_marlin(a, dev.sms, dev.stream), "launch_marlin");
        }
      });
      const double us = tm.device_us;
      const float one = 1.f, zero = 0.f;
      const Timing tb = time_calls(o.iters, dev.stream, [&](int i) {
        const void* W = dw.at(dbytes * size_t(i % dcopies));
        check_blas(cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, int(N), int(M), int(K), &one, W,
                                CUDA_R_16BF, int(K), x.get(), CUDA_R_16BF, int(K), &zero, y.get(),
                                CUDA_R_16BF, int(N), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                   "cublasGemmEx");
      });
      const double blas_us = tb.device_us;
      const double tbs = double(qbytes) / (us * 1e-6) / 1e12;
      const char* kernel = dequant                    ? "dequant+cuBLAS"
                           : large == LargeM::wgmma   ? "wgmma"
                           : M > 64 && tiled_takes(a) ? "tiled"
                                                      : "stream";
      std::printf("%6lld %10.2f %10.2f %8.2f %10.2f %7.1f%% %9.2f %9s\n", (long long)M, us, blas_us,
                  blas_us / us, tbs, 100 * tbs / o.peak_tbs, tm.host_us, kernel);
      nlohmann::json row = {{"K", K},
                            {"N", N},
                            {"M", M},
                            {"nibble_us", us},
                            {"cublas_us", blas_us},
                            {"speedup_vs_cublas", blas_us / us},
                            {"weight_bytes", qbytes},
                            {"tbs", tbs},
                            {"pct_of_peak", 100 * tbs / o.peak_tbs},
                            {"kernel", kernel}};
      if (dequant) row["chunk_cols"] = plan_dequant_gemm(a).chunk_cols;
      if (o.sweep) {
        // Both kernels and their splits, so the dispatch rule can be read off one run.
        auto stream_us = [&](StreamConfig c) {
          // A split the launcher refuses (a ring too deep for the staged rows) is not timed.
          if (launch_marlin_stream(a, c, dev.stream) != cudaSuccess) return -1.0;
          return time_calls(o.iters, dev.stream,
                            [&](int i) {
                              a.w = view(i % copies);
                              check_cuda(launch_marlin_stream(a, c, dev.stream),
                                         "launch_marlin_stream");
                            })
              .device_us;
        };
        auto tiled_us = [&](int c) {
          return time_calls(o.iters, dev.stream,
                            [&](int i) {
                              a.w = view(i % copies);
                              check_cuda(launch_marlin_tiled(a, c, dev.stream),
                                         "launch_marlin_tiled");
                            })
              .device_us;
        };
        nlohmann::json sweep = nlohmann::json::array();
        std::printf("        stream:");
        if (M <= 256) {
          const std::vector<int> Rs = M <= 16 ? std::vector<int>{1, 2, 4} : std::vector<int>{1};
          // Tiles of 8 rows, of 16 with the rows as A (A0) and with the weight as A (A1), or only
          // those --tile-rows and --weights-as-a name.
          std::vector<std::pair<int, int>> forms;
          for (auto [T, WA] : {std::pair{8, 1}, {16, 0}, {16, 1}})
            if ((M <= 16 || T == 16) && (o.tile_rows == 0 || o.tile_rows == T) &&
                (o.weights_as_a < 0 || T == 8 || o.weights_as_a == WA))
              forms.push_back({T, WA});
          for (int W : {0, 2, 3, 4, 6})
            for (auto [T, WA] : forms)
              for (int B : {2, 1})
                for (int R : Rs)
                  for (int C : {1, 2, 3, 4, 6, 8}) {
                    StreamConfig c{R, C, B, T};
                    c.weights_as_a = WA;
                    c.weight_ring = W;
                    const double t = stream_us(c);
                    if (t < 0) continue;
                    sweep.push_back({{"kernel", "stream"},
                                     {"T", T},
                                     {"A", WA},
                                     {"B", B},
                                     {"R", R},
                                     {"C", C},
                                     {"W", W},
                                     {"us", t}});
                    std::printf(" T%dA%dB%dR%dC%dW%d %.1f", T, WA, B, R, C, W, t);
                  }
          // The launcher's own split with every ring depth.
          for (int W : {0, 2, 3, 4, 5, 6}) {
            StreamConfig c = choose_stream_config(a, dev.sms);
            c.weight_ring = W;
            const double t = stream_us(c);
            if (t < 0) continue;
            sweep.push_back({{"kernel", "stream"}, {"chosen", true}, {"W", W}, {"us", t}});
            std::printf(" chosenW%d %.2f", W, t);
          }
        }
        if (M >= 16 && dequant_gemm_takes(a)) {
          // The dequantizing GEMM in shares of N / 1, 2, 4, 8 columns and at its own plan.
          std::printf("  dequant:");
          for (int64_t parts : {0, 1, 2, 4, 8}) {
            const DequantGemmPlan plan =
                plan_dequant_gemm(a, parts == 0 ? 0 : (N + parts - 1) / parts);
            const double t =
                time_calls(o.iters, dev.stream, [&](int i) { dequant_gemm(i, plan); }).device_us;
            sweep.push_back({{"kernel", "dequant"},
                             {"chunk_cols", plan.chunk_cols},
                             {"planned", parts == 0},
                             {"us", t}});
            std::printf(" %s%lld %.1f", parts == 0 ? "plan:" : "", (long long)plan.chunk_cols, t);
          }
          // The dequantization alone, the whole weight at once.
          const DequantGemmPlan whole = plan_dequant_gemm(a, N);
          const double t = time_calls(o.iters, dev.stream, [&](int i) {
                             a.w = view(i % copies);
                             check_cuda(launch_marlin_dequant(a.w, 0, N, DType::bf16, scratch.get(),
                                                              K, dev.stream),
                                        "launch_marlin_dequant");
                           }).device_us;
          sweep.push_back({{"kernel", "dequant_only"}, {"us", t}});
          std::printf(" only-dequant %.1f (%.2f TB/s written)", t,
                      double(whole.weight_bytes) / (t * 1e-6) / 1e12);
        }
        if (M >= 16 && wgmma_takes(a) && wgmma_available()) {
          // The warpgroup-MMA kernel with one or two sets of A fragments at each split of K, and
          // above 128 rows its 256-row blocks (two sets).
          const WgmmaConfig chosen = choose_wgmma_config(a, wgmma_fit());
          std::printf("  wgmma (chosen R%d %sC%d):", chosen.rows, chosen.paired ? "P" : "",
                      chosen.cluster);
          // Two fragment sets with and without the TMA copies ("T"), alternating.
          for (int rows : {128, 256})
            for (bool paired : {false, true})
              for (int C : {1, 2, 3, 4})
                for (bool tma : {false, true}) {
                  if (rows == 256 && (!paired || M <= 128)) continue;
                  if (tma && !paired) continue;
                  const WgmmaConfig c{C, paired, rows, tma};
                  const double t =
                      time_calls(o.iters, dev.stream, [&](int i) {
                        a.w = view(i % copies);
                        check_cuda(launch_marlin_wgmma(a, c, dev.stream), "launch_marlin_wgmma");
                      }).device_us;
                  sweep.push_back({{"kernel", "wgmma"},
                                   {"paired", paired},
                                   {"C", C},
                                   {"rows", rows},
                                   {"tma", tma},
                                   {"us", t}});
                  std::printf(" %s%s%sC%d %.1f", rows == 256 ? "R256" : "", paired ? "P" : "",
                              tma ? "T" : "", C, t);
                }
        }
        if (M >= 16) {
          std::printf("  tiled:");
          for (int C : {1, 2, 3, 4}) {
            const double t = tiled_us(C);
            sweep.push_back({{"kernel", "tiled"}, {"C", C}, {"us", t}});
            std::printf(" C%d %.1f", C, t);
          }
        }
        std::printf("\n");
        row["sweep"] = sweep;
      }
      rows.push_back(row);
    }
  }
  return rows;
}

}  // namespace
}  // namespace nibble::cuda::bench

int main(int argc, char** argv) {
  using namespace nibble::cuda::bench;
  try {
    Options o = parse(argc, argv);
    Device dev = open_device(o.legacy_stream);
    if (o.peak_tbs <= 0) o.peak_tbs = dev.nominal_tbs > 0 ? dev.nominal_tbs : 4.8;
    nlohmann::json out = {{"device", dev.name},       {"sms", dev.sms},
                          {"l2_bytes", dev.l2_bytes}, {"nominal_peak_tbs", o.peak_tbs},
                          {"copy_tbs", dev.copy_tbs}, {"iters", o.iters}};
    // What the small-M kernel was told, so that an A/B run's files say which arm they are.
    out["tile_rows"] = o.tile_rows;        // 0: the kernel's own choice
    out["weights_as_a"] = o.weights_as_a;  // -1: the kernel's own choice
    out["stream"] = o.legacy_stream ? "legacy default" : "non-blocking";
    out["zero_points"] = o.asymmetric ? "random (asymmetric)" : "none (symmetric)";
    out["weight_ring"] = o.weight_ring;  // -1: the kernel's own choice
    out["overlap_previous"] = o.overlap;
    out["wgmma_tma"] = o.wgmma_tma;  // -1: the kernel's own choice
    out["plugin"] = o.plugin;
    std::printf("%s, %d SMs, L2 %.0f MB; device-to-device copy %.2f TB/s (nominal peak %.1f)\n",
                dev.name.c_str(), dev.sms, dev.l2_bytes / 1e6, dev.copy_tbs, o.peak_tbs);
    cublasHandle_t blas = nullptr;
    check_blas(cublasCreate(&blas), "cublasCreate");
    check_blas(cublasSetStream(blas, dev.stream), "cublasSetStream");
    if (o.linear) out["linear"] = run_linear(o, dev, blas);
    if (o.moe) {
      MoeBenchShape shape = o.moe_shape;
      shape.asymmetric = o.asymmetric;
      out["moe"] = run_moe(o.plugin, o.iters, o.peak_tbs, dev, shape);
      out["moe_shape"] = {
          {"experts", o.moe_shape.experts},
          {"top_k", o.moe_shape.top_k},
          {"K", o.moe_shape.K},
          {"I", o.moe_shape.I},
          {"zero_points", o.asymmetric ? "random (asymmetric)" : "none (symmetric)"}};
    }
    cublasDestroy(blas);
    if (!o.json.empty()) std::ofstream(o.json) << out.dump(2) << "\n";
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nibble-cuda-bench: %s\n", e.what());
    return 1;
  }
}
