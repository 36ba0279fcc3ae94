// The honesty grid for MoE kernels: expert counts, top-k, w13/w2 group sizes, bits, zero points
// and act-order, with routing that includes "no expert" (-1) slots and both id dtypes.
#include <algorithm>
#include <cstring>
#include <numeric>

#include "grid.hpp"

namespace nibble::conformance {

namespace {

struct MoeConfig {
  int experts = 8, top_k = 2, bits = 4, group13 = 128, group2 = 128;
  bool symmetric = false, act_order = false, zero16 = false;
  int64_t K = 256, I = 128;
  bool ids64 = false;

  std::string label() const {
    return "E " + std::to_string(experts) + ", top_k " + std::to_string(top_k) + ", bits " +
           std::to_string(bits) + ", w13 group " + std::to_string(group13) + ", w2 group " +
           std::to_string(group2) + ", act-order " + (act_order ? "on" : "off") + ", " +
           (symmetric ? "sym"
            : zero16  ? "asym with zero 16 (GPTQ v1)"
                      : "asym") +
           ", K " + std::to_string(K) + ", I " + std::to_string(I) + ", ids " +
           (ids64 ? "i64" : "i32");
  }
};

std::vector<MoeConfig> moe_configs(bool quick) {
  auto make = [](int E, int top_k, int bits, int g13, int g2, bool sym, bool act, bool z16,
                 int64_t K, int64_t I, bool ids64) {
    MoeConfig c;
    c.experts = E;
    c.top_k = top_k;
    c.bits = bits;
    c.group13 = g13;
    c.group2 = g2;
    c.symmetric = sym;
    c.act_order = act;
    c.zero16 = z16;
    c.K = K;
    c.I = I;
    c.ids64 = ids64;
    return c;
  };
  std::vector<MoeConfig> all = {
      make(8, 2, 4, 128, 128, false, false, false, 256, 128, false),
      make(8, 1, 8, 64, 32, true, false, false, 256, 128, true),
      make(64, 8, 4, 32, -1, false, false, false, 128, 64, false),
      make(8, 2, 4, 64, 64, false, true, false, 256, 128, true),
      make(8, 8, 4, 128, 32, false, false, true, 256, 128, false),
      make(8, 2, 8, -1, 128, false, false, false, 256, 128, false),
      make(64, 2, 4, 64, 128, true, false, false, 128, 64, true),
      make(64, 8, 8, 32, 64, false, true, false, 128, 64, false),
  };
  if (quick) all.resize(4);
  return all;
}

// Distinct experts per row with positive weights; every fifth row leaves its last slot empty
// (-1) when top_k > 1, as a host does for padding tokens.
void make_routing(const MoeConfig& c, int64_t M, uint32_t seed, std::vector<int32_t>* ids,
                  std::vector<double>* weights) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0.1f, 1.0f);
  ids->assign(size_t(M * c.top_k), -1);
  weights->assign(size_t(M * c.top_k), 0.0);
  std::vector<int32_t> order(size_t(c.experts));
  for (int64_t m = 0; m < M; ++m) {
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    for (int j = 0; j < c.top_k; ++j) {
      (*ids)[size_t(m * c.top_k + j)] = order[size_t(j)];
      (*weights)[size_t(m * c.top_k + j)] = double(u(rng));  // exact in f32
    }
    if (c.top_k > 1 && m % 5 == 3) (*ids)[size_t(m * c.top_k + c.top_k - 1)] = -1;
  }
}

void run_moe(const SuiteContext& ctx, const nibble_kernel* k, const MoeConfig& c, uint32_t seed,
             CheckResult& r) {
  TestExperts ex = random_experts(c.experts, c.K, c.I, c.bits, c.group13, c.group2, c.symmetric,
                                  c.act_order, seed, c.zero16);
  nibble_layer_desc d = moe_desc(ex, c.top_k, "conformance.moe");
  d.numeric_mode = k->numeric_mode;
  run_grid(
      ctx, k, d,
      [&](const nibble_layer_desc& dd, nibble_status* s, std::string* m) {
        return prepare_moe(k, dd, ex, s, m);
      },
      c.K, c.K, seed,
      [&](const PreparedLayer& layer, const Activations& a, int64_t M, Tensor2D& y,
          std::vector<double>* reference, std::string* message) {
        std::vector<int32_t> ids;
        std::vector<double> wts;
        make_routing(c, M, seed * 7 + uint32_t(M), &ids, &wts);
        Tensor2D id_t(M, c.top_k, c.ids64 ? sdk::dtype_i64() : sdk::dtype_i32());
        Tensor2D wt_t(M, c.top_k, sdk::dtype_f32());
        for (size_t i = 0; i < ids.size(); ++i) {
          if (c.ids64)
            reinterpret_cast<int64_t*>(id_t.bytes.data())[i] = ids[i];
          else
            reinterpret_cast<int32_t*>(id_t.bytes.data())[i] = ids[i];
          reinterpret_cast<float*>(wt_t.bytes.data())[i] = float(wts[i]);
        }
        *reference = reference_moe(ex, a.values, M, c.top_k, ids, wts);
        auto x = tensor_of(a);
        return layer.forward(&x->t, &y.t, &id_t.t, &wt_t.t, ctx.options.threads, message);
      },
      r);
}

}  // namespace

std::vector<Check> moe_grid_checks(SuiteContext& ctx, const nibble_kernel* k) {
  std::vector<Check> checks;
  const SuiteContext* c = &ctx;
  uint32_t seed = 900;
  for (const MoeConfig& cfg : moe_configs(ctx.options.quick)) {
    ++seed;
    checks.push_back({std::string("honesty/") + k->name + "/" + cfg.label(),
                      [c, k, cfg, seed](CheckResult& r) { run_moe(*c, k, cfg, seed, r); }});
  }
  return checks;
}

}  // namespace nibble::conformance
