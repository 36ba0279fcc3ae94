// The honesty grid for linear and dense kernels: every configuration can_implement accepts must
// prepare, run, write every output element and stay within the kernel's declared bound against
// a float64 reference; every refusal must say why.
#include <cmath>
#include <cstring>

#include "grid.hpp"

namespace nibble::conformance {

std::vector<int64_t> grid_rows(bool quick) {
  if (quick) return {1, 7, 33};
  return {1, 2, 7, 33, 128};
}

std::vector<PreparedFor> accept_and_prepare(const nibble_kernel* k, nibble_layer_desc d,
                                            const PrepareFn& prepare_fn,
                                            std::vector<std::string>& failures,
                                            std::string* refusal) {
  uint32_t accepted = 0;
  for (uint32_t flag : kDtypeFlags) {
    d.act_dtypes = flag;
    bool ok = false;
    std::string why = why_not(k, d, &ok);
    if (ok) {
      accepted |= flag;
    } else {
      if (why == "(empty reason)")
        failures.push_back(std::string(dtype_flag_name(flag)) + ": refused without a reason");
      if (refusal->empty()) *refusal = std::string(dtype_flag_name(flag)) + " refused: " + why;
    }
  }
  std::vector<PreparedFor> out;
  if (!accepted) return out;
  auto prepare_for = [&](uint32_t flags) {
    d.act_dtypes = flags;
    report_step("prepare");
    nibble_status status = NIBBLE_OK;
    std::string message;
    auto layer = prepare_fn(d, &status, &message);
    if (!layer) {
      failures.push_back("can_implement accepted it, prepare failed with status " +
                         std::to_string(status) + ": " + message);
      return;
    }
    if (!message.empty()) failures.push_back(message);  // e.g. unbalanced get/put_expert
    out.push_back({flags, std::move(layer)});
  };
  d.act_dtypes = accepted;
  bool together = false;
  why_not(k, d, &together);
  if (together) {
    prepare_for(accepted);
  } else {
    for (uint32_t flag : kDtypeFlags)
      if (accepted & flag) prepare_for(flag);
  }
  return out;
}

std::string compare_output(const Tensor2D& y, const std::vector<double>& ref, double bound) {
  const int64_t rows = y.shape[0], cols = y.shape[1];
  size_t bad = 0;
  std::vector<double> got(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      double v = y.get(r, c);
      got[size_t(r * cols + c)] = v;
      if (!std::isfinite(v)) ++bad;
    }
  if (bad)
    return std::to_string(bad) + " of " + std::to_string(rows * cols) +
           " output elements were not written (still NaN) or are not finite";
  // Tensor2D keeps one poisoned element after the last row: a write there overran y.
  if (!std::isnan(sdk::load_float(y.bytes.data(), y.t.dtype, size_t(rows * y.strides[0]))))
    return "wrote past the end of y";
  double err = relative_error(got, ref);
  if (!(err <= bound)) return "relative error " + sci(err) + " > bound " + sci(bound);
  return "";
}

void run_grid(const SuiteContext& ctx, const nibble_kernel* k, const nibble_layer_desc& d,
              const PrepareFn& prepare_fn, int64_t K, int64_t out_cols, uint32_t seed,
              const GridForward& forward, CheckResult& r) {
  std::vector<std::string> failures;
  std::string refusal;
  auto prepared = accept_and_prepare(k, d, prepare_fn, failures, &refusal);
  size_t runs = 0;
  for (const PreparedFor& p : prepared)
    for (uint32_t flag : kDtypeFlags) {
      if (!(p.dtypes & flag)) continue;
      for (int64_t M : grid_rows(ctx.options.quick)) {
        Activations a = random_activations(M, K, dtype_of_flag(flag), seed + uint32_t(M));
        Tensor2D y(M, out_cols, a.dtype);
        poison(y.bytes, a.dtype);
        std::string message;
        std::vector<double> reference;
        ++runs;
        std::string where = "M " + std::to_string(M) + ", " + dtype_flag_name(flag) + ": ";
        report_step(where.substr(0, where.size() - 2));
        nibble_status s = forward(*p.layer, a, M, y, &reference, &message);
        if (s != NIBBLE_OK) {
          failures.push_back(where + "forward failed with status " + std::to_string(s) + ": " +
                             message);
          continue;
        }
        std::string bad = compare_output(y, reference, bound_for(k, flag));
        if (!bad.empty()) failures.push_back(where + bad);
      }
    }
  conclude(r, failures, refusal, runs);
}

void conclude(CheckResult& r, const std::vector<std::string>& failures, const std::string& refusal,
              size_t runs) {
  if (!failures.empty()) {
    r.passed = false;
    r.message = join_limited(failures, 6);
  } else if (runs == 0) {
    r.message = "refused with a reason (" + refusal + ")";
  } else {
    r.message = std::to_string(runs) + " forward calls within the bound" +
                (refusal.empty() ? "" : "; " + refusal);
  }
}

namespace {

// A grid forward call of a linear or dense layer (no routing), against `reference`.
GridForward linear_forward(
    const SuiteContext& ctx,
    std::function<std::vector<double>(const Activations& a, int64_t M)> reference) {
  return [&ctx, reference](const PreparedLayer& layer, const Activations& a, int64_t M, Tensor2D& y,
                           std::vector<double>* expected, std::string* message) {
    *expected = reference(a, M);
    auto x = tensor_of(a);
    return layer.forward(&x->t, &y.t, nullptr, nullptr, ctx.options.threads, message);
  };
}

enum class Zeros { symmetric, asymmetric, v1_zero16 };

struct LinearConfig {
  int bits = 4;
  int group = 128;
  bool act_order = false;
  Zeros zeros = Zeros::asymmetric;
  int64_t K = 256, N = 128;
  DLDataType scales = sdk::dtype_f16();
  bool bias = false;

  std::string label() const {
    std::string s = "bits " + std::to_string(bits) + ", group " + std::to_string(group) +
                    (group == -1 ? " (per channel)" : "") + ", act-order " +
                    (act_order ? "on" : "off") + ", " +
                    (zeros == Zeros::symmetric    ? "sym"
                     : zeros == Zeros::asymmetric ? "asym"
                                                  : "asym with zero 16 (GPTQ v1)") +
                    ", K " + std::to_string(K) + ", N " + std::to_string(N) + ", scales " +
                    sdk::dtype_name(scales);
    return bias ? s + ", bias" : s;
  }
};

// The full grid is the product below; --quick keeps every bits × group pair (aligned and
// ragged) and samples act-order, zero 16 and the scales dtypes.
std::vector<LinearConfig> linear_configs(bool quick) {
  std::vector<LinearConfig> out;
  const std::pair<int64_t, int64_t> shapes[2] = {{256, 128}, {200, 72}};
  for (int bits : {4, 8})
    for (int group : {32, 64, 128, -1})
      for (bool act : {false, true})
        for (Zeros z : {Zeros::symmetric, Zeros::asymmetric, Zeros::v1_zero16})
          for (auto [K, N] : shapes) {
            if (act && group == -1) continue;  // act-order needs groups
            if (z == Zeros::v1_zero16 && bits != 4) continue;
            const bool ragged = K == 200;
            if (quick) {
              bool keep =
                  (!act && z != Zeros::v1_zero16 && (!ragged || z == Zeros::asymmetric)) ||
                  (act && z == Zeros::asymmetric && !ragged && group != 64) ||
                  (act && ragged && bits == 4 && group == 64 && z == Zeros::asymmetric) ||
                  (z == Zeros::v1_zero16 && !act && (group == 128 || group == -1) && !ragged);
              if (!keep) continue;
            }
            LinearConfig c;
            c.bits = bits;
            c.group = group;
            c.act_order = act;
            c.zeros = z;
            c.K = K;
            c.N = N;
            c.bias = z != Zeros::symmetric;
            out.push_back(c);
          }
  // The scales' dtype is the checkpoint's; f16 is the common case, bf16 and f32 occur.
  for (DLDataType s : {sdk::dtype_bf16(), sdk::dtype_f32()}) {
    LinearConfig c;
    c.scales = s;
    c.bias = true;
    out.push_back(c);
  }
  return out;
}

void run_linear(const SuiteContext& ctx, const nibble_kernel* k, const LinearConfig& c,
                uint32_t seed, CheckResult& r) {
  QuantSpec spec;
  spec.K = c.K;
  spec.N = c.N;
  spec.bits = c.bits;
  spec.group_size = c.group;
  spec.symmetric = c.zeros == Zeros::symmetric;
  spec.v1_zero16 = c.zeros == Zeros::v1_zero16;
  spec.act_order = c.act_order;
  spec.bias = c.bias;
  spec.scales_dtype = c.scales;
  spec.seed = seed;
  CanonicalWeight w = random_weight(spec);
  nibble_layer_desc d = linear_desc(w, "conformance.linear");
  d.numeric_mode = k->numeric_mode;
  run_grid(
      ctx, k, d,
      [&](const nibble_layer_desc& dd, nibble_status* s, std::string* m) {
        return prepare_linear(k, dd, w, s, m);
      },
      c.K, c.N, seed,
      linear_forward(
          ctx, [&](const Activations& a, int64_t M) { return reference_linear(w, a.values, M); }),
      r);
}

struct DenseConfig {
  DLDataType dtype;
  int64_t K, N;
  bool bias;
  std::string label() const {
    return "weight " + sdk::dtype_name(dtype) + ", K " + std::to_string(K) + ", N " +
           std::to_string(N) + (bias ? ", bias" : "");
  }
};

void run_dense(const SuiteContext& ctx, const nibble_kernel* k, const DenseConfig& c, uint32_t seed,
               CheckResult& r) {
  TestDense w = random_dense(c.K, c.N, c.dtype, c.bias, seed);
  nibble_layer_desc d = w.desc();
  d.numeric_mode = k->numeric_mode;
  run_grid(
      ctx, k, d,
      [&](const nibble_layer_desc& dd, nibble_status* s, std::string* m) {
        return prepare_dense(k, dd, w, s, m);
      },
      c.K, c.N, seed,
      linear_forward(
          ctx, [&](const Activations& a, int64_t M) { return reference_dense(w, a.values, M); }),
      r);
}

}  // namespace

std::vector<Check> grid_checks(SuiteContext& ctx) {
  std::vector<Check> checks;
  const SuiteContext* c = &ctx;
  for (const nibble_kernel* k : kernels_of(ctx.plugin.desc)) {
    if (!k || !missing_kernel_functions(k).empty() || !k->name) continue;
    const std::string prefix = std::string("honesty/") + k->name + "/";
    if (k->op == NIBBLE_OP_LINEAR) {
      uint32_t seed = 100;
      for (const LinearConfig& cfg : linear_configs(ctx.options.quick)) {
        ++seed;
        checks.push_back({prefix + cfg.label(),
                          [c, k, cfg, seed](CheckResult& r) { run_linear(*c, k, cfg, seed, r); }});
      }
    } else if (k->op == NIBBLE_OP_DENSE) {
      uint32_t seed = 500;
      for (DLDataType dt : {sdk::dtype_f32(), sdk::dtype_f16(), sdk::dtype_bf16()})
        for (bool ragged : {false, true}) {
          DenseConfig cfg{dt, ragged ? 200 : 256, ragged ? 72 : 128, ragged};
          ++seed;
          checks.push_back({prefix + cfg.label(),
                            [c, k, cfg, seed](CheckResult& r) { run_dense(*c, k, cfg, seed, r); }});
        }
    } else if (k->op == NIBBLE_OP_MOE) {
      for (Check& m : moe_grid_checks(ctx, k)) checks.push_back(std::move(m));
    }
  }
  return checks;
}

}  // namespace nibble::conformance
