// Format truth: the upstream-packed fixtures (GPTQ v1, AWQ GEMM, a GPTQ MoE block), decoded by
// nibble::Checkpoint into canonical weights, run through every kernel that accepts them and
// compared with the float64 outputs stored beside them (io.safetensors).
#include <nibble/checkpoint.hpp>
#include <nibble/conformance/fixture_tensors.hpp>

#include <filesystem>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "grid.hpp"

namespace nibble::conformance {

namespace {

namespace fs = std::filesystem;

// The inputs the fixtures carry: f32 as x_m{M}, bf16 as x_bf16_m{M}.
struct Input {
  const char* tag;  // "" or "bf16_"
  uint32_t flag;
};
constexpr Input kInputs[] = {{"", NIBBLE_DTYPE_F32}, {"bf16_", NIBBLE_DTYPE_BF16}};
constexpr int kRows[] = {1, 7, 33};

// One forward call on a fixture's inputs: runs `layer` on x (M rows; `m` names the call's io
// tensors, e.g. "bf16_m7") into the poisoned y and returns the status.
using FixtureForward =
    std::function<nibble_status(const PreparedLayer& layer, const DLTensor& x, int M,
                                const std::string& m, Tensor2D& y, std::string* message)>;

// Prepare `in` for `d` for each activation dtype the kernel accepts, run every stored input of
// those dtypes through `forward` into an [M][out_cols] output and compare it with the stored one.
void run_fixture(const nibble_kernel* k, const nibble_layer_desc& d, const nibble_weight_input& in,
                 const SafetensorsFile& io, int64_t out_cols, const FixtureForward& forward,
                 CheckResult& r) {
  std::vector<std::string> failures;
  std::string refusal;
  auto prepared = accept_and_prepare(
      k, d,
      [&](const nibble_layer_desc& dd, nibble_status* s, std::string* m) {
        return prepare(k, dd, in, s, m);
      },
      failures, &refusal);
  size_t runs = 0;
  for (const PreparedFor& p : prepared)
    for (const Input& input : kInputs) {
      if (!(p.dtypes & input.flag)) continue;
      for (int M : kRows) {
        std::string m = input.tag;  // (not tag + "m" + ...: GCC 12's -Wrestrict false positive)
        m += "m";
        m += std::to_string(M);
        Activations a = activations_of(io.tensor("x_" + m), dtype_of_flag(input.flag));
        auto x = tensor_of(a);
        Tensor2D y(M, out_cols, a.dtype);
        poison(y.bytes, a.dtype);
        std::string message, where = m + ": ";
        ++runs;
        report_step(m);
        if (forward(*p.layer, x->t, M, m, y, &message) != NIBBLE_OK) {
          failures.push_back(where + "forward failed: " + message);
          continue;
        }
        std::string bad =
            compare_output(y, values_of(io.tensor("y_" + m)), bound_for(k, input.flag));
        if (!bad.empty()) failures.push_back(where + bad);
      }
    }
  conclude(r, failures, refusal, runs);
}

void run_linear_fixture(const fs::path& dir, const nibble_kernel* k, int threads, CheckResult& r) {
  Checkpoint ckpt = Checkpoint::open(dir);
  auto layers = ckpt.linear_layers();
  if (layers.empty()) throw std::runtime_error(dir.string() + ": no linear layer");
  CanonicalWeight w = ckpt.decode_linear(layers.front().prefix);
  auto io = SafetensorsFile::open(dir / "io.safetensors");
  const nibble_canonical_weight view = w.view();
  run_fixture(
      k, sdk::host::linear_desc(view, "fixture", k->numeric_mode), sdk::host::quantized_input(view),
      *io, w.N,
      [&](const PreparedLayer& layer, const DLTensor& x, int, const std::string&, Tensor2D& y,
          std::string* message) {
        return layer.forward(&x, &y.t, nullptr, nullptr, threads, message);
      },
      r);
}

void run_moe_fixture(const fs::path& dir, const nibble_kernel* k, int threads, CheckResult& r) {
  Checkpoint ckpt = Checkpoint::open(dir);
  auto blocks = ckpt.moe_blocks();
  if (blocks.empty()) throw std::runtime_error(dir.string() + ": no MoE block");
  const MoeInfo& info = blocks.front();
  // The fixture is small: every expert is decoded up front, so the descriptor speaks for all.
  std::vector<std::pair<CanonicalWeight, CanonicalWeight>> decoded;
  for (int e = 0; e < info.num_experts; ++e) decoded.push_back(ckpt.decode_expert(info.prefix, e));
  std::vector<nibble_canonical_weight> w13_views, w2_views;
  for (const auto& [w13, w2] : decoded) {
    w13_views.push_back(w13.view());
    w2_views.push_back(w2.view());
  }
  const int top_k = info.top_k;
  const sdk::host::MoeShape shape{info.hidden, info.intermediate, info.num_experts, top_k};
  const nibble_layer_desc d =
      sdk::host::moe_desc(shape, w13_views, w2_views, "fixture", k->numeric_mode);
  sdk::host::ExpertViews experts(w13_views, w2_views);  // counts the plugin's get/put
  auto io = SafetensorsFile::open(dir / "io.safetensors");
  run_fixture(
      k, d, sdk::host::experts_input(experts.source()), *io, d.K,
      [&](const PreparedLayer& layer, const DLTensor& x, int M, const std::string& m, Tensor2D& y,
          std::string* message) {
        const TensorView& ids = io->tensor("topk_ids_" + m);
        const TensorView& wts = io->tensor("topk_weights_" + m);
        Tensor2D id_t(M, top_k, sdk::dtype_i32()), wt_t(M, top_k, sdk::dtype_f32());
        for (size_t i = 0; i < size_t(M * top_k); ++i) {
          reinterpret_cast<int32_t*>(id_t.bytes.data())[i] = ids.i32(i);
          reinterpret_cast<float*>(wt_t.bytes.data())[i] = float(wts.as_double(i));
        }
        return layer.forward(&x, &y.t, &id_t.t, &wt_t.t, threads, message);
      },
      r);
}

}  // namespace

std::vector<Check> fixture_checks(SuiteContext& ctx) {
  std::vector<Check> checks;
  std::string dir =
      ctx.options.fixtures_dir.empty() ? default_fixtures_dir() : ctx.options.fixtures_dir;
  const char* linear_fixtures[] = {"gptq_v1_sym_g128", "awq_gemm_g128"};
  const char* moe_fixtures[] = {"moe_gptq_e8_top2"};
  if (dir.empty() || !fs::is_directory(fs::path(dir) / linear_fixtures[0])) {
    checks.push_back({"fixtures/found", [dir](CheckResult& r) {
                        r.passed = false;
                        r.message = "the upstream-packed fixtures are not in '" + dir +
                                    "'; pass --fixtures DIR (a directory holding " +
                                    "gptq_v1_sym_g128/, awq_gemm_g128/, moe_gptq_e8_top2/)";
                      }});
    return checks;
  }
  const int threads = ctx.options.threads;
  for (const nibble_kernel* k : kernels_of(ctx.plugin.desc)) {
    if (!k || !missing_kernel_functions(k).empty() || !k->name) continue;
    const std::string prefix = std::string("fixtures/") + k->name + "/";
    if (k->op == NIBBLE_OP_LINEAR)
      for (const char* f : linear_fixtures) {
        fs::path path = fs::path(dir) / f;
        checks.push_back({prefix + f, [path, k, threads](CheckResult& r) {
                            run_linear_fixture(path, k, threads, r);
                          }});
      }
    if (k->op == NIBBLE_OP_MOE)
      for (const char* f : moe_fixtures) {
        fs::path path = fs::path(dir) / f;
        checks.push_back({prefix + f, [path, k, threads](CheckResult& r) {
                            run_moe_fixture(path, k, threads, r);
                          }});
      }
  }
  return checks;
}

}  // namespace nibble::conformance
