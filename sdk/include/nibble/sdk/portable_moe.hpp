// Portable MoE driver for reference backends: groups (token, slot) pairs by expert, runs each
// expert's gate/up and down projections through any layout usable with portable_gemm.hpp, and
// reduces the slots of each token. Numerics: h = silu(gate) · up in fp32 (never rounded to the
// activation dtype), the routing weight multiplies the fp32 down projection, the slots of a token
// are summed in fp32 in slot order, and only the final sum is rounded to y's dtype. Experts with
// no token cost nothing; a token whose ids are all -1 gets 0. Additive helpers.
#pragma once

#include <nibble/sdk/portable_gemm.hpp>
#include <nibble/sdk/weights.hpp>

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace nibble::sdk::portable {

/// One expert's prepared weights: w13 [2I][K] (gate rows first) and w2 [K][I].
template <class Layout>
struct Expert {
  Layout w13;
  Layout w2;
};

/// Check one expert weight against the MoE descriptor (shapes, bits, per-weight group size).
inline void check_expert_weight(const QuantWeight& w, const nibble_layer_desc& d, int32_t expert,
                                bool is_w13) {
  const std::string what = std::string(d.name ? d.name : "moe") + " expert " +
                           std::to_string(expert) + (is_w13 ? " w13" : " w2");
  const int64_t K = is_w13 ? d.K : d.N, N = is_w13 ? 2 * d.N : d.K;
  const int32_t gs = is_w13 ? d.group_size : d.w2_group_size;
  require(w.K() == K && w.N() == N, what + ": shape [" + std::to_string(w.N()) + "][" +
                                        std::to_string(w.K()) + "], expected [" +
                                        std::to_string(N) + "][" + std::to_string(K) + "]");
  require(w.bits() == d.bits, what + ": " + std::to_string(w.bits()) +
                                  " bits, the layer descriptor says " + std::to_string(d.bits));
  require(w.group_size() == gs, what + ": group size " + std::to_string(w.group_size()) +
                                    ", the layer descriptor says " + std::to_string(gs));
  require(!w.has_bias(), what + ": expert biases are not part of the MoE op");
}

/// Fetch every expert from `src`, hand its two canonical weights to `make(w13, w2)` (which returns
/// an Expert<Layout>) and give the expert back at once, so one expert's canonical form is alive at
/// a time.
template <class Layout, class Make>
std::vector<Expert<Layout>> prepare_experts(const nibble_layer_desc& d,
                                            const nibble_moe_source& src, const Make& make) {
  require(src.num_experts == d.num_experts,
          "moe: the source has " + std::to_string(src.num_experts) +
              " experts, the layer descriptor says " + std::to_string(d.num_experts));
  require(src.get_expert != nullptr, "moe: the expert source has no get_expert");
  std::vector<Expert<Layout>> experts;
  experts.reserve(size_t(d.num_experts));
  for (int32_t e = 0; e < d.num_experts; ++e) {
    nibble_canonical_weight w13{}, w2{};
    w13.struct_size = sizeof w13;
    w2.struct_size = sizeof w2;
    nibble_error err{};
    err.struct_size = sizeof err;
    nibble_status s = src.get_expert(src.ctx, e, &w13, &w2, &err);
    if (s != NIBBLE_OK)
      throw PluginError(s, "moe: fetching expert " + std::to_string(e) + " failed: " + err.message);
    struct GiveBack {
      const nibble_moe_source& src;
      int32_t e;
      ~GiveBack() {
        if (src.put_expert) src.put_expert(src.ctx, e);
      }
    } give_back{src, e};
    const std::string name = std::string(d.name ? d.name : "moe") + " expert " + std::to_string(e);
    QuantWeight a(w13, name + " w13"), b(w2, name + " w2");
    check_expert_weight(a, d, e, true);
    check_expert_weight(b, d, e, false);
    experts.push_back(make(a, b));
  }
  return experts;
}

/// Staged widths the MoE workspace must hold.
struct MoeWidths {
  int64_t w13 = 0;  ///< widest staged input of any w13
  int64_t w2 = 0;   ///< widest staged input of any w2
};

/// The widest staged inputs over all experts.
template <class Layout>
MoeWidths moe_widths(const std::vector<Expert<Layout>>& experts) {
  MoeWidths w;
  for (const auto& e : experts) {
    w.w13 = std::max(w.w13, e.w13.width());
    w.w2 = std::max(w.w2, e.w2.width());
  }
  return w;
}

/// Workspace bytes of an MoE forward: per (token, slot) row the staged x, gate/up, staged h and
/// the down projection, all f32.
inline size_t moe_workspace_bytes(int64_t M, int64_t top_k, int64_t K, int64_t I, MoeWidths w) {
  const size_t rows = size_t(M) * size_t(top_k);
  return rows * size_t(w.w13 + 2 * I + w.w2 + K) * sizeof(float);
}

/// y[m] = Σ_j topk_weights[m,j] · down_e(silu(gate_e(x[m])) · up_e(x[m])), e = topk_ids[m,j].
template <class Layout, class Parallel>
void moe_forward(const std::vector<Expert<Layout>>& experts, int64_t K, int64_t I,
                 const ForwardArgs& a, const Exec& exec, const Parallel& parallel) {
  const int64_t M = a.M, top_k = a.topk_ids.cols, E = int64_t(experts.size());
  const MoeWidths widths = moe_widths(experts);
  require(exec.workspace_size >= moe_workspace_bytes(M, top_k, K, I, widths),
          "forward: workspace too small");

  // Rows of the work buffers are (token, slot) pairs sorted by expert; slot_row finds them back.
  std::vector<int64_t> begin(size_t(E) + 1, 0);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t j = 0; j < top_k; ++j) {
      int64_t e = a.topk_ids.get_int(m, j);
      if (e < -1 || e >= E)
        throw PluginError(NIBBLE_INVALID_ARGUMENT,
                          "topk_ids[" + std::to_string(m) + ", " + std::to_string(j) +
                              "] = " + std::to_string(e) + " is outside [0, " + std::to_string(E) +
                              ") (or -1 for no expert)");
      if (e >= 0) ++begin[size_t(e) + 1];
    }
  for (int64_t e = 0; e < E; ++e) begin[size_t(e) + 1] += begin[size_t(e)];
  std::vector<int64_t> fill(begin.begin(), begin.end() - 1);
  std::vector<int64_t> slot_row(size_t(M * top_k), -1);
  std::vector<int64_t> row_token(static_cast<size_t>(begin[size_t(E)]));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t j = 0; j < top_k; ++j) {
      int64_t e = a.topk_ids.get_int(m, j);
      if (e < 0) continue;
      int64_t r = fill[size_t(e)]++;
      slot_row[size_t(m * top_k + j)] = r;
      row_token[size_t(r)] = m;
    }
  const int64_t rows = begin[size_t(E)];

  float* xs = static_cast<float*>(exec.workspace);  // [rows][widths.w13]
  float* gate_up = xs + rows * widths.w13;          // [rows][2I]
  float* hs = gate_up + rows * 2 * I;               // [rows][widths.w2]
  float* down = hs + rows * widths.w2;              // [rows][K]

  // Tasks: (expert, row block, column block) for experts that have rows.
  struct Task {
    int64_t expert, r0, r1, n0, n1;
  };
  auto tasks_for = [&](int64_t N) {
    std::vector<Task> tasks;
    for (int64_t e = 0; e < E; ++e)
      for (int64_t r0 = begin[size_t(e)]; r0 < begin[size_t(e) + 1]; r0 += kRowBlock)
        for (int64_t n0 = 0; n0 < N; n0 += kColBlock)
          tasks.push_back(Task{e, r0, std::min(begin[size_t(e) + 1], r0 + kRowBlock), n0,
                               std::min(N, n0 + kColBlock)});
    return tasks;
  };
  auto expert_of = [&](int64_t r) {
    return int64_t(std::upper_bound(begin.begin(), begin.end(), r) - begin.begin()) - 1;
  };

  parallel(rows, [&](int64_t r) {
    const auto& w13 = experts[size_t(expert_of(r))].w13;
    stage_rows(a.x, row_token[size_t(r)], row_token[size_t(r)] + 1, w13.input_columns(),
               w13.width(), xs + r * widths.w13, widths.w13);
  });

  auto run = [&](const std::vector<Task>& tasks, bool first, const float* in, int64_t ld_in,
                 float* out, int64_t ld_out) {
    parallel(int64_t(tasks.size()), [&](int64_t i) {
      const Task& t = tasks[size_t(i)];
      const Layout& w = first ? experts[size_t(t.expert)].w13 : experts[size_t(t.expert)].w2;
      const int64_t nb = t.n1 - t.n0;
      std::vector<float> block(size_t((t.r1 - t.r0) * nb));
      TileScratch scratch;
      multiply_block(w, in + t.r0 * ld_in, ld_in, t.r1 - t.r0, t.n0, t.n1, block.data(), scratch);
      for (int64_t r = t.r0; r < t.r1; ++r)
        std::memcpy(out + r * ld_out + t.n0, block.data() + (r - t.r0) * nb,
                    size_t(nb) * sizeof(float));
    });
  };
  run(tasks_for(2 * I), true, xs, widths.w13, gate_up, 2 * I);

  // h = silu(gate) · up in fp32, staged straight into w2's input order.
  parallel(rows, [&](int64_t r) {
    const auto& w2 = experts[size_t(expert_of(r))].w2;
    const std::vector<int32_t>& cols = w2.input_columns();
    const float* g = gate_up + r * 2 * I;
    float* h = hs + r * widths.w2;
    for (int64_t c = 0; c < w2.width(); ++c) {
      const int64_t i = cols.empty() ? c : cols[size_t(c)];
      if (i < 0) {
        h[c] = 0.f;
        continue;
      }
      const float gate = g[i];
      h[c] = gate / (1.f + std::exp(-gate)) * g[I + i];
    }
  });
  run(tasks_for(K), false, hs, widths.w2, down, K);

  const int64_t row_blocks = ceil_div(M, kRowBlock);
  parallel(row_blocks, [&](int64_t b) {
    std::vector<float> acc(static_cast<size_t>(K));
    for (int64_t m = b * kRowBlock; m < std::min(M, (b + 1) * kRowBlock); ++m) {
      std::fill(acc.begin(), acc.end(), 0.f);
      for (int64_t j = 0; j < top_k; ++j) {
        const int64_t r = slot_row[size_t(m * top_k + j)];
        if (r < 0) continue;
        const float weight = a.topk_weights.get(m, j);
        const float* d = down + r * K;
        for (int64_t k = 0; k < K; ++k) acc[size_t(k)] += weight * d[k];
      }
      for (int64_t k = 0; k < K; ++k) a.y.set(m, k, acc[size_t(k)]);
    }
  });
}

/// An MoE layer prepared in some layout, expert by expert.
template <class Layout, class Parallel>
class MoePrepared : public Prepared {
 public:
  /// Take the experts of a layer with hidden size K, intermediate size I and top_k slots.
  MoePrepared(std::vector<Expert<Layout>> experts, int64_t K, int64_t I, int64_t top_k)
      : experts_(std::move(experts)), K_(K), I_(I), top_k_(top_k), widths_(moe_widths(experts_)) {}
  size_t bytes() const override {
    size_t total = 0;
    for (const auto& e : experts_) total += e.w13.bytes() + e.w2.bytes();
    return total;
  }
  size_t workspace_bytes(int64_t M) const override {
    return moe_workspace_bytes(M, top_k_, K_, I_, widths_);
  }
  void forward(const ForwardArgs& args, const Exec& exec) const override {
    moe_forward(experts_, K_, I_, args, exec, Parallel(exec.num_threads));
  }
  /// The prepared experts (read-only).
  const std::vector<Expert<Layout>>& experts() const { return experts_; }

 private:
  std::vector<Expert<Layout>> experts_;
  int64_t K_, I_, top_k_;
  MoeWidths widths_;
};

}  // namespace nibble::sdk::portable
