// Robustness, per kernel: descriptors the ABI does not define, bad tensors (each must return an
// error status with a message, not crash), valid strided tensors, and concurrent forward calls
// on one prepared handle giving identical results.
#include <cstring>
#include <optional>
#include <thread>

#include "grid.hpp"

namespace nibble::conformance {

namespace {

// A layer the kernel accepts, prepared, with what a forward call needs.
struct Subject {
  CanonicalWeight weight;
  TestDense dense;
  TestExperts experts;
  nibble_layer_desc desc{};
  uint32_t dtype_flag = 0;
  std::unique_ptr<PreparedLayer> layer;
  int64_t out_cols = 0;
  std::string refusal;  // why nothing was accepted, when layer is null

  bool moe() const { return desc.op == NIBBLE_OP_MOE; }
  std::vector<double> reference(const Activations& a, const std::vector<int32_t>& ids,
                                const std::vector<double>& w) const {
    if (desc.op == NIBBLE_OP_LINEAR) return reference_linear(weight, a.values, a.M);
    if (desc.op == NIBBLE_OP_DENSE) return reference_dense(dense, a.values, a.M);
    return reference_moe(experts, a.values, a.M, desc.top_k, ids, w);
  }
};

// The first of a few common layers the kernel accepts, for the first dtype it accepts.
std::unique_ptr<Subject> make_subject(const nibble_kernel* k) {
  auto s = std::make_unique<Subject>();
  for (int bits : {4, 8})
    for (int group : {128, 32, -1}) {
      if (k->op == NIBBLE_OP_LINEAR) {
        QuantSpec spec;
        spec.bits = bits;
        spec.group_size = group;
        spec.K = 256;
        spec.N = 128;
        spec.bias = true;
        s->weight = random_weight(spec);
        s->desc = linear_desc(s->weight, "conformance.robustness");
        s->out_cols = 128;
      } else if (k->op == NIBBLE_OP_DENSE) {
        s->dense = random_dense(256, 128, bits == 4 ? sdk::dtype_f16() : sdk::dtype_f32(), true, 3);
        s->desc = s->dense.desc("conformance.robustness");
        s->out_cols = 128;
      } else {
        s->experts = random_experts(8, 128, 64, bits, group, group, false, false, 5);
        s->desc = moe_desc(s->experts, 2, "conformance.robustness");
        s->out_cols = 128;
      }
      s->desc.numeric_mode = k->numeric_mode;
      for (uint32_t flag : kDtypeFlags) {
        s->desc.act_dtypes = flag;
        bool ok = false;
        std::string why = why_not(k, s->desc, &ok);
        if (!ok) {
          if (s->refusal.empty()) s->refusal = why;
          continue;
        }
        nibble_status status = NIBBLE_OK;
        std::string message;
        if (k->op == NIBBLE_OP_LINEAR)
          s->layer = prepare_linear(k, s->desc, s->weight, &status, &message);
        else if (k->op == NIBBLE_OP_DENSE)
          s->layer = prepare_dense(k, s->desc, s->dense, &status, &message);
        else
          s->layer = prepare_moe(k, s->desc, s->experts, &status, &message);
        if (!s->layer) {
          s->refusal = "prepare failed: " + message;
          return s;
        }
        s->dtype_flag = flag;
        return s;
      }
    }
  return s;
}

// Inputs for one forward call on a subject: x, y (poisoned) and, for MoE, routing.
struct Call {
  Activations a;
  std::unique_ptr<Tensor2D> x, y, ids, weights;
  std::vector<int32_t> id_values;
  std::vector<double> weight_values;
  nibble_forward_args args{};
};

std::unique_ptr<Call> make_call(const Subject& s, int64_t M, int64_t x_stride = 0,
                                int64_t y_stride = 0) {
  auto c = std::make_unique<Call>();
  const DLDataType dt = dtype_of_flag(s.dtype_flag);
  c->a = random_activations(M, s.desc.K, dt, 77);
  c->x = std::make_unique<Tensor2D>(M, s.desc.K, dt, x_stride);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < s.desc.K; ++k)
      sdk::store_float(c->x->bytes.data(), dt, size_t(m * c->x->strides[0] + k),
                       float(c->a.values[size_t(m * s.desc.K + k)]));
  c->y = std::make_unique<Tensor2D>(M, s.out_cols, dt, y_stride);
  poison(c->y->bytes, dt);
  c->args.struct_size = sizeof c->args;
  c->args.x = &c->x->t;
  c->args.y = &c->y->t;
  if (s.moe()) {
    c->ids = std::make_unique<Tensor2D>(M, s.desc.top_k, sdk::dtype_i32());
    c->weights = std::make_unique<Tensor2D>(M, s.desc.top_k, sdk::dtype_f32());
    for (int64_t m = 0; m < M; ++m)
      for (int j = 0; j < s.desc.top_k; ++j) {
        int32_t e = int32_t((m * 3 + j * 5) % s.desc.num_experts);
        double w = 0.25 + 0.5 * j;
        c->id_values.push_back(e);
        c->weight_values.push_back(w);
        reinterpret_cast<int32_t*>(c->ids->bytes.data())[m * s.desc.top_k + j] = e;
        reinterpret_cast<float*>(c->weights->bytes.data())[m * s.desc.top_k + j] = float(w);
      }
    c->args.topk_ids = &c->ids->t;
    c->args.topk_weights = &c->weights->t;
  }
  return c;
}

void check_undefined_descriptors(const nibble_kernel* k, CheckResult& r) {
  struct Case {
    const char* what;
    std::function<void(nibble_layer_desc&)> edit;
  };
  const Case cases[] = {
      {"bits 3", [](nibble_layer_desc& d) { d.bits = 3; }},
      {"bits 16", [](nibble_layer_desc& d) { d.bits = 16; }},
      {"group 0", [](nibble_layer_desc& d) { d.group_size = 0; }},
      {"group -7", [](nibble_layer_desc& d) { d.group_size = -7; }},
      {"K 0", [](nibble_layer_desc& d) { d.K = 0; }},
      {"N -1", [](nibble_layer_desc& d) { d.N = -1; }},
      {"unknown op 99", [](nibble_layer_desc& d) { d.op = 99; }},
      {"unknown numeric mode 7", [](nibble_layer_desc& d) { d.numeric_mode = 7; }},
      {"unknown activation dtype bit", [](nibble_layer_desc& d) { d.act_dtypes = 1u << 7; }},
      {"int32 weight dtype", [](nibble_layer_desc& d) { d.weight_dtype = sdk::dtype_i32(); }},
      {"MoE top_k 0", [](nibble_layer_desc& d) { d.top_k = 0; }},
      {"MoE activation 0", [](nibble_layer_desc& d) { d.activation = 0; }},
  };
  std::vector<std::string> accepted, failures;
  for (const Case& c : cases) {
    if (std::strncmp(c.what, "MoE", 3) == 0 && k->op != NIBBLE_OP_MOE) continue;
    // Bits and groups mean nothing to a dense kernel.
    if (k->op == NIBBLE_OP_DENSE &&
        (std::strncmp(c.what, "bits", 4) == 0 || std::strncmp(c.what, "group", 5) == 0))
      continue;
    nibble_layer_desc d{};
    d.struct_size = sizeof d;
    d.op = k->op;
    d.name = "conformance.undefined";
    d.K = 128;
    d.N = 64;
    d.bits = 4;
    d.group_size = 32;
    d.weight_dtype = sdk::dtype_f16();
    d.numeric_mode = k->numeric_mode;
    d.act_dtypes = NIBBLE_DTYPE_F32;
    d.num_experts = 8;
    d.top_k = 2;
    d.activation = NIBBLE_ACT_SILU;
    d.w2_group_size = 32;
    c.edit(d);
    bool ok = false;
    std::string why = why_not(k, d, &ok);
    if (ok)
      accepted.push_back(c.what);
    else if (why == "(empty reason)")
      failures.push_back(std::string(c.what) + ": refused without a reason");
  }
  if (!failures.empty()) {
    r.passed = false;
    r.message = join_limited(failures, 6);
  } else {
    r.message = "no crash, every refusal has a reason";
    // Accepting an undefined descriptor is not provably wrong, but the author should know.
    if (!accepted.empty()) r.message += "; note: accepted " + join_limited(accepted, 8);
  }
}

// Each case breaks one thing in an otherwise valid call; the kernel must answer with an error.
// A device kernel need not see a wrong routing id's value (device memory is not readable before
// its work runs, and the ABI lets it treat such an id safely itself): accepting one is noted.
void check_bad_tensors(const SuiteContext& ctx, const Subject& s, CheckResult& r) {
  struct Case {
    const char* what;
    std::function<void(Call&, const Subject&)> edit;
    bool moe_only;
    bool a_value_on_the_device = false;
  };
  static int64_t one_dim_shape[1] = {4};
  static int64_t bad_col_strides[2] = {0, 2};
  static int64_t short_row_strides[2] = {1, 1};
  const Case cases[] = {
      {"x of dtype int32", [](Call& c, const Subject&) { c.x->t.dtype = sdk::dtype_i32(); }, false},
      {"y of another dtype than x",
       [](Call& c, const Subject&) {
         c.y->t.dtype = c.x->t.dtype.bits == 32 ? sdk::dtype_f16() : sdk::dtype_f32();
       },
       false},
      {"x with K+1 columns", [](Call& c, const Subject&) { c.x->shape[1] += 1; }, false},
      {"y with one column too many", [](Call& c, const Subject&) { c.y->shape[1] += 1; }, false},
      {"y with fewer rows than x", [](Call& c, const Subject&) { c.y->shape[0] -= 1; }, false},
      {"x of one dimension",
       [](Call& c, const Subject&) {
         c.x->t.ndim = 1;
         c.x->t.shape = one_dim_shape;
       },
       false},
      {"x with null data", [](Call& c, const Subject&) { c.x->t.data = nullptr; }, false},
      {"y with null data", [](Call& c, const Subject&) { c.y->t.data = nullptr; }, false},
      {"x with column stride 2",
       [](Call& c, const Subject&) {
         bad_col_strides[0] = c.x->shape[1] * 2;
         c.x->t.strides = bad_col_strides;
       },
       false},
      {"x with a row stride shorter than a row",
       [](Call& c, const Subject&) { c.x->t.strides = short_row_strides; }, false},
      {"x missing", [](Call& c, const Subject&) { c.args.x = nullptr; }, false},
      {"topk_ids with an expert id = E",
       [](Call& c, const Subject& s) {
         reinterpret_cast<int32_t*>(c.ids->bytes.data())[1] = s.desc.num_experts;
       },
       true, true},
      {"topk_ids with id -2",
       [](Call& c, const Subject&) { reinterpret_cast<int32_t*>(c.ids->bytes.data())[0] = -2; },
       true, true},
      {"topk_ids of dtype f32", [](Call& c, const Subject&) { c.ids->t.dtype = sdk::dtype_f32(); },
       true},
      {"topk_weights of the wrong shape", [](Call& c, const Subject&) { c.weights->shape[1] += 1; },
       true},
      {"topk_ids missing", [](Call& c, const Subject&) { c.args.topk_ids = nullptr; }, true},
  };
  std::vector<std::string> failures, noted;
  const sdk::host::Device device = tensor_device(s.layer->kernel());
  const bool on_device = bool(device);
  size_t tried = 0;
  for (const Case& bad : cases) {
    if (bad.moe_only && !s.moe()) continue;
    auto call = make_call(s, 4);
    report_step(bad.what);
    std::string message;
    ++tried;
    nibble_status st = NIBBLE_OK;
    if (!on_device) {
      bad.edit(*call, s);
      st = s.layer->forward_raw(&call->args, ctx.options.threads, 4, &message);
    } else {
      // The valid call is staged on the device first, and the copies are what gets broken: a
      // shape that claims more than the host buffer holds must not be copied from it. A broken
      // value travels with the copy, so that edit comes first.
      if (bad.a_value_on_the_device) bad.edit(*call, s);
      std::optional<sdk::host::StagedForward> staged;
      st = status_of([&] { staged.emplace(device, call->args, nullptr); }, &message);
      if (st != NIBBLE_OK) {
        failures.push_back(std::string(bad.what) + ": staging the valid call failed: " + message);
        continue;
      }
      call->x->t = *staged->args().x;
      call->y->t = *staged->args().y;
      if (s.moe()) {
        call->ids->t = *staged->args().topk_ids;
        call->weights->t = *staged->args().topk_weights;
      }
      if (!bad.a_value_on_the_device) bad.edit(*call, s);
      st = s.layer->forward_as_given(&call->args, ctx.options.threads, 4, &message);
    }
    if (st == NIBBLE_OK && on_device && bad.a_value_on_the_device)
      noted.push_back(bad.what);
    else if (st == NIBBLE_OK)
      failures.push_back(std::string(bad.what) + ": accepted (status OK)");
    else if (message.empty())
      failures.push_back(std::string(bad.what) + ": status " + std::to_string(st) +
                         " without a message");
  }
  if (!failures.empty()) {
    r.passed = false;
    r.message = join_limited(failures, 8);
  } else {
    r.message = std::to_string(tried - noted.size()) +
                " broken calls each returned an error with a message";
    if (!noted.empty())
      r.message += "; note: on the device, accepted " + join_limited(noted, 4) +
                   " (the ids are device memory)";
  }
}

// Row strides larger than a row are valid: the result must match, and the gaps stay untouched.
void check_strided(const SuiteContext& ctx, const Subject& s, CheckResult& r) {
  const int64_t M = 7;
  auto call = make_call(s, M, s.desc.K + 8, s.out_cols + 5);
  // Fill the gaps of y with a finite sentinel instead of NaN, so an overwrite is visible.
  const DLDataType dt = call->y->t.dtype;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t c = s.out_cols; c < s.out_cols + 5; ++c)
      sdk::store_float(call->y->bytes.data(), dt, size_t(m * call->y->strides[0] + c), 1234.0f);
  std::string message;
  nibble_status st = s.layer->forward_raw(&call->args, ctx.options.threads, M, &message);
  if (st != NIBBLE_OK) {
    r.passed = false;
    r.message = "forward with row strides x " + std::to_string(s.desc.K + 8) + ", y " +
                std::to_string(s.out_cols + 5) + " failed: " + message;
    return;
  }
  for (int64_t m = 0; m < M; ++m)
    for (int64_t c = s.out_cols; c < s.out_cols + 5; ++c)
      if (call->y->get(m, c) != 1234.0) {
        r.passed = false;
        r.message = "wrote into the gap between rows of y (row " + std::to_string(m) + ", column " +
                    std::to_string(c) + ")";
        return;
      }
  std::string bad =
      compare_output(*call->y, s.reference(call->a, call->id_values, call->weight_values),
                     bound_for(s.layer->kernel(), s.dtype_flag));
  if (!bad.empty()) {
    r.passed = false;
    r.message = "with row strides: " + bad;
    return;
  }
  r.message = "row strides honoured, gaps untouched";
}

// Four threads, each with its own workspace and output, on one prepared handle.
void check_concurrent(const SuiteContext& ctx, const Subject& s, CheckResult& r) {
  const int64_t M = 33;
  auto single = make_call(s, M);
  std::string message;
  if (s.layer->forward_raw(&single->args, ctx.options.threads, M, &message) != NIBBLE_OK) {
    r.passed = false;
    r.message = "single-threaded forward failed: " + message;
    return;
  }
  constexpr int kThreads = 4, kRounds = 3;
  std::vector<std::string> failures(kThreads);
  std::vector<std::thread> pool;
  for (int t = 0; t < kThreads; ++t)
    pool.emplace_back([&, t] {
      for (int round = 0; round < kRounds && failures[size_t(t)].empty(); ++round) {
        auto call = make_call(s, M);
        std::string msg;
        if (s.layer->forward_raw(&call->args, ctx.options.threads, M, &msg) != NIBBLE_OK)
          failures[size_t(t)] = "thread " + std::to_string(t) + ": forward failed: " + msg;
        else if (call->y->bytes != single->y->bytes)
          failures[size_t(t)] = "thread " + std::to_string(t) + ", round " + std::to_string(round) +
                                ": the output differs from a lone call's";
      }
    });
  for (auto& th : pool) th.join();
  std::vector<std::string> bad;
  for (auto& f : failures)
    if (!f.empty()) bad.push_back(f);
  if (!bad.empty()) {
    r.passed = false;
    r.message = join_limited(bad, 4);
    return;
  }
  r.message = std::to_string(kThreads) + " threads × " + std::to_string(kRounds) +
              " calls gave bit-identical outputs";
}

}  // namespace

std::vector<Check> robustness_checks(SuiteContext& ctx) {
  std::vector<Check> checks;
  const SuiteContext* c = &ctx;
  for (const nibble_kernel* k : kernels_of(ctx.plugin.desc)) {
    if (!k || !missing_kernel_functions(k).empty() || !k->name) continue;
    const std::string prefix = std::string("robustness/") + k->name + "/";
    checks.push_back({prefix + "undefined descriptors",
                      [k](CheckResult& r) { check_undefined_descriptors(k, r); }});
    // One prepared subject shared by the three checks below, made when the first of them runs
    // (a resumed child may start at any of them). The last of them releases it: nothing may be
    // released after shutdown.
    auto subject = std::make_shared<std::unique_ptr<Subject>>();
    auto with_subject =
        [c, k, subject](void (*fn)(const SuiteContext&, const Subject&, CheckResult&), bool last) {
          return [c, k, subject, fn, last](CheckResult& r) {
            if (!*subject) *subject = make_subject(k);
            if (!(*subject)->layer)
              r.message = "not applicable: the kernel accepts none of the common layers (" +
                          (*subject)->refusal + ")";
            else
              fn(*c, **subject, r);
            if (last) subject->reset();
          };
        };
    checks.push_back(
        {prefix + "bad tensors return an error", with_subject(&check_bad_tensors, false)});
    checks.push_back({prefix + "strided tensors", with_subject(&check_strided, false)});
    checks.push_back({prefix + "concurrent forward on one prepared handle",
                      with_subject(&check_concurrent, true)});
  }
  return checks;
}

}  // namespace nibble::conformance
