// Format truth: the upstream-packed fixtures (GPTQ v1, AWQ GEMM, a GPTQ MoE block), decoded by
// nibble::Checkpoint into canonical weights, run through every kernel that accepts them and
// compared with the float64 outputs stored beside them (io.safetensors).
#include <algorithm>
#include <nibble/checkpoint.hpp>

#include <filesystem>

#include "grid.hpp"

namespace nibble::conformance {

namespace {

namespace fs = std::filesystem;

// Activations from an io.safetensors tensor (F32 or BF16), exactly.
Activations activations_from(const TensorView& t, DLDataType dtype) {
  Activations a;
  a.M = t.shape.at(0);
  a.K = t.shape.at(1);
  a.dtype = dtype;
  a.bytes.resize(size_t(a.M * a.K) * sdk::dtype_bytes(dtype));
  a.values.resize(size_t(a.M * a.K));
  for (size_t i = 0; i < a.values.size(); ++i) {
    a.values[i] = t.as_double(i);
    sdk::store_float(a.bytes.data(), dtype, i, float(a.values[i]));
  }
  return a;
}

std::vector<double> values_of(const TensorView& t) {
  std::vector<double> v(size_t(t.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = t.as_double(i);
  return v;
}

// The inputs the fixtures carry: f32 as x_m{M}, bf16 as x_bf16_m{M}.
struct Input {
  const char* tag;  // "" or "bf16_"
  uint32_t flag;
};
constexpr Input kInputs[] = {{"", NIBBLE_DTYPE_F32}, {"bf16_", NIBBLE_DTYPE_BF16}};
constexpr int kRows[] = {1, 7, 33};

nibble_layer_desc linear_desc_of(const CanonicalWeight& w, const nibble_kernel* k) {
  nibble_layer_desc d{};
  d.struct_size = sizeof d;
  d.op = NIBBLE_OP_LINEAR;
  d.name = "fixture";
  d.K = w.K;
  d.N = w.N;
  d.bits = w.bits;
  d.group_size = w.group_size;
  d.has_g_idx = w.g_idx.empty() ? 0 : 1;
  d.symmetric = w.symmetric() ? 1 : 0;
  d.has_bias = w.bias.empty() ? 0 : 1;
  d.weight_dtype = w.scales_dtype;
  d.numeric_mode = k->numeric_mode;
#if NIBBLE_ABI_MINOR >= 1
  d.max_zero = w.zeros.empty() ? 0 : *std::max_element(w.zeros.begin(), w.zeros.end());
#endif
  return d;
}

void run_linear_fixture(const fs::path& dir, const nibble_kernel* k, int threads, CheckResult& r) {
  Checkpoint ckpt = Checkpoint::open(dir);
  auto layers = ckpt.linear_layers();
  if (layers.empty()) throw std::runtime_error(dir.string() + ": no linear layer");
  CanonicalWeight w = ckpt.decode_linear(layers.front().prefix);
  auto io = SafetensorsFile::open(dir / "io.safetensors");
  std::vector<std::string> failures;
  std::string refusal;
  nibble_canonical_weight view = w.view();
  nibble_weight_input in{};
  in.struct_size = sizeof in;
  in.quantized = &view;
  auto prepared = accept_and_prepare(
      k, linear_desc_of(w, k),
      [&](const nibble_layer_desc& d, nibble_status* s, std::string* m) {
        return prepare(k, d, in, s, m);
      },
      failures, &refusal);
  size_t runs = 0;
  for (const PreparedFor& p : prepared)
    for (const Input& input : kInputs) {
      if (!(p.dtypes & input.flag)) continue;
      for (int M : kRows) {
        std::string m = "m";  // (not "m" + ...: GCC 12's -Wrestrict false positive)
        m += std::to_string(M);
        Activations a = activations_from(io->tensor(std::string("x_") + input.tag + m),
                                         dtype_of_flag(input.flag));
        auto x = tensor_of(a);
        Tensor2D y(M, w.N, a.dtype);
        poison(y.bytes, a.dtype);
        std::string message, where = m + " " + dtype_flag_name(input.flag) + ": ";
        ++runs;
        report_step(where.substr(0, where.size() - 2));
        if (p.layer->forward(&x->t, &y.t, nullptr, nullptr, threads, &message) != NIBBLE_OK) {
          failures.push_back(where + "forward failed: " + message);
          continue;
        }
        std::string bad = compare_output(
            y, values_of(io->tensor(std::string("y_") + input.tag + m)), bound_for(k, input.flag));
        if (!bad.empty()) failures.push_back(where + bad);
      }
    }
  conclude(r, failures, refusal, runs);
}

// The fixture's experts handed out one at a time through nibble_moe_source, as the core does.
struct FixtureExperts {
  const Checkpoint* ckpt = nullptr;
  std::string prefix;
  std::map<int, std::pair<CanonicalWeight, CanonicalWeight>> live;
  std::string error;
};

nibble_status fixture_get(void* ctx, int32_t e, nibble_canonical_weight* w13,
                          nibble_canonical_weight* w2, nibble_error* error) {
  auto* f = static_cast<FixtureExperts*>(ctx);
  try {
    auto& slot = f->live[e] = f->ckpt->decode_expert(f->prefix, e);
    *w13 = slot.first.view();
    *w2 = slot.second.view();
    return NIBBLE_OK;
  } catch (const std::exception& ex) {
    f->error = ex.what();
    if (error && error->struct_size > offsetof(nibble_error, message))
      std::snprintf(error->message, 128, "expert %d: decode failed", int(e));
    return NIBBLE_INVALID_ARGUMENT;
  }
}

void fixture_put(void* ctx, int32_t e) { static_cast<FixtureExperts*>(ctx)->live.erase(e); }

void run_moe_fixture(const fs::path& dir, const nibble_kernel* k, int threads, CheckResult& r) {
  Checkpoint ckpt = Checkpoint::open(dir);
  auto blocks = ckpt.moe_blocks();
  if (blocks.empty()) throw std::runtime_error(dir.string() + ": no MoE block");
  const MoeInfo& info = blocks.front();
  auto first = ckpt.decode_expert(info.prefix, 0);
  const int top_k = info.top_k;
  nibble_layer_desc d = linear_desc_of(first.first, k);
  d.op = NIBBLE_OP_MOE;
  d.K = info.hidden;
  d.N = info.intermediate;
  d.has_bias = 0;
  d.num_experts = info.num_experts;
  d.top_k = top_k;
  d.activation = NIBBLE_ACT_SILU;
  d.w2_group_size = first.second.group_size;
  d.w2_has_g_idx = first.second.g_idx.empty() ? 0 : 1;
  d.w2_symmetric = first.second.symmetric() ? 1 : 0;
  FixtureExperts source_state;
  source_state.ckpt = &ckpt;
  source_state.prefix = info.prefix;
  nibble_moe_source src{};
  src.struct_size = sizeof src;
  src.num_experts = info.num_experts;
  src.ctx = &source_state;
  src.get_expert = &fixture_get;
  src.put_expert = &fixture_put;
  nibble_weight_input in{};
  in.struct_size = sizeof in;
  in.experts = &src;
  auto io = SafetensorsFile::open(dir / "io.safetensors");
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
        std::string m = std::string(input.tag) + "m" + std::to_string(M);
        Activations a = activations_from(io->tensor("x_" + m), dtype_of_flag(input.flag));
        auto x = tensor_of(a);
        Tensor2D y(M, d.K, a.dtype);
        poison(y.bytes, a.dtype);
        const TensorView& ids = io->tensor("topk_ids_" + m);
        const TensorView& wts = io->tensor("topk_weights_" + m);
        Tensor2D id_t(M, top_k, sdk::dtype_i32()), wt_t(M, top_k, sdk::dtype_f32());
        for (size_t i = 0; i < size_t(M * top_k); ++i) {
          reinterpret_cast<int32_t*>(id_t.bytes.data())[i] = ids.i32(i);
          reinterpret_cast<float*>(wt_t.bytes.data())[i] = float(wts.as_double(i));
        }
        std::string message, where = m + ": ";
        ++runs;
        report_step(where.substr(0, where.size() - 2));
        if (p.layer->forward(&x->t, &y.t, &id_t.t, &wt_t.t, threads, &message) != NIBBLE_OK) {
          failures.push_back(where + "forward failed: " + message);
          continue;
        }
        std::string bad =
            compare_output(y, values_of(io->tensor("y_" + m)), bound_for(k, input.flag));
        if (!bad.empty()) failures.push_back(where + bad);
      }
    }
  if (!source_state.error.empty()) failures.push_back("decoding an expert: " + source_state.error);
  conclude(r, failures, refusal, runs);
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
