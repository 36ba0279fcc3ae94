// The fused MoE's forward pass on the linear kernels' packed layout. Compiled without ISA flags: it
// sorts the routed (token, slot) pairs by expert, prepares each token's activations once, and hands
// (expert, row block, panel range) segments to the same per-ISA micro-kernels the linear layers use
// (the plan: moe_plan.hpp); gate and up are interleaved so silu(gate)·up is applied in the GEMM's
// blocks.
//
// Determinism: every output element is produced by exactly one segment, whose value does not
// depend on which piece or thread runs it; the slots of a token are summed in slot order by one
// thread. So y is bit-identical for any exec.num_threads.
#include "moe_forward.hpp"

#include "activations.hpp"
#include "kernel_api.hpp"
#include "linear_kernels.hpp"
#include "moe_plan.hpp"
#include "packed_weight.hpp"
#include "probe.hpp"

#include <nibble/sdk/numeric.hpp>
#include <nibble/sdk/portable_moe.hpp>
#include <nibble/sdk/weights.hpp>

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace nibble::cpu_amx {
namespace {

enum class Projection { w13, w2 };

// Row blocks of the GEMM work: a multiple of the tile kernels' 32-row padding and of the
// streaming kernels' 4-row pass.
constexpr int64_t kTaskRows = 64;
// Above this many routed rows per used expert, the GEMM work is cut into this many pieces per
// thread and handed out dynamically (the AMX unit is shared and its speed flips); at or below it
// (decode) each thread's share is one contiguous run of the weights in a few pieces, taken in
// order: long weight streams, and a thread that is late loses only the pieces others reach first.
constexpr int64_t kStreamingRowsPerExpert = 2;
constexpr int64_t kPiecesPerThread = 8;
constexpr int64_t kDecodePiecesPerThread = 4;
// A routed row costs about this fraction of streaming one panel's weights (balancing only).
constexpr double kRowCostPerPanel = 1.0 / 8;
// With gate and up panels interleaved, w13's GEMM runs in blocks of this many panels (an even
// number: gate/up pairs) into a scratch buffer of kTaskRows × 16·kSiluPanels fp32 (128 KiB, L2),
// and silu(gate)·up is applied there before the block leaves the cache.
constexpr int64_t kSiluPanels = 32;
// Tokens per task of the final per-token reduction.
constexpr int64_t kCombineRows = 16;
// Routed rows up to which activation preparation and the reduction run on the calling thread.
constexpr int64_t kInlineRows = 8;

size_t align64(size_t b) { return (b + 63) / 64 * 64; }

struct MicroKernels {
  A16Fn a16_small, a16_large;
  A8Fn a8_small, a8_large;
};

MicroKernels micro_kernels_for(IsaLevel level) {
  switch (level) {
    case IsaLevel::amx:
      return {&a16_avx512, &a16_amx, &a8_avx512, &a8_amx};
    case IsaLevel::avx512:
      return {&a16_avx512, &a16_avx512, &a8_avx512, &a8_avx512};
    case IsaLevel::avx2:
      return {&a16_avx2, &a16_avx2, &a8_avx2, &a8_avx2};
    default:
      return {&a16_portable, &a16_portable, &a8_portable, &a8_portable};
  }
}

// An upper bound of Σ_e (activation workspace of n_e rows) over any routing of `rows` pairs to at
// most `experts` experts, for weights whose largest Kp and chunk count are given. The exact sizes
// come from activations.cpp; padded_rows(n) < n + 32 and each align64 adds < 64. A W4A16 row
// takes the larger of its bf16 form (a row and a sum per chunk) and its fixed-point one (two int8
// rows, a step and a sum per chunk), which experts of any row count take without AMX.
size_t activation_bound(MoeMode mode, int64_t kp, int64_t chunks, int64_t rows, int64_t experts) {
  const size_t r = size_t(rows), u = size_t(experts), ch = size_t(chunks);
  const size_t row16 = 2 * size_t(a16_stride(kp)), row8 = size_t(a8_stride(kp));
  if (mode == MoeMode::a16)
    return r * std::max(row16 + 4 * ch, 2 * row8 + 8 * ch) + u * (32 * row16 + 192);
  return r * (row8 + 4 + 4 * ch) + u * (32 * (row8 + 4) + 192);
}

// Round row m of y (K fp32 values) to y's dtype, once per element.
void store_row(const sdk::Matrix& y, int64_t m, const float* v) {
  if (y.dtype.bits == 32) {
    std::memcpy(y.row<float>(m), v, size_t(y.cols) * sizeof(float));
  } else if (y.dtype.code == kDLBfloat) {
    uint16_t* out = y.row<uint16_t>(m);
    for (int64_t k = 0; k < y.cols; ++k) out[k] = sdk::f32_to_bf16(v[k]);
  } else {
    uint16_t* out = y.row<uint16_t>(m);
    for (int64_t k = 0; k < y.cols; ++k) out[k] = sdk::f32_to_f16(v[k]);
  }
}

// One (expert, padded row block) unit of activation preparation.
struct RowTask {
  int32_t expert;
  int64_t m0, m1;
};

// The plan of one forward call, reused by the next call on the same thread: vectors keep their
// capacity, so only a call larger than every earlier one allocates.
struct MoeScratch {
  SortedRouting routing;
  std::vector<size_t> offsets;  // [E]: expert e's activation buffer in the region
  std::vector<RowTask> fills;   // activation preparation, by (expert, padded row block)
  std::vector<Unit> units;      // a projection's GEMM work before it is cut
  GemmPieces pieces;
  // The decode pass runs both projections in one hand-off (project_w13_then_w2): w2's plan and
  // per-expert counters of w13 segments still to run (-1: the expert's w2 input is ready).
  std::vector<size_t> offsets2;
  GemmPieces pieces2;
  std::unique_ptr<std::atomic<int64_t>[]> w13_left;
  size_t w13_left_size = 0;
};

float silu_times(float gate, float up) { return gate / (1.f + std::exp(-gate)) * up; }

// w13 ([2I][K], gate rows first) packed with its output columns reordered so that panel 2i holds
// gate columns [16i, 16i + 16) and panel 2i + 1 the up columns of the same h columns: any
// even-aligned panel range then computes whole columns of h = silu(gate)·up. A pure permutation
// of columns, so every value is computed exactly as without it. Needs I % 16 == 0.
}  // namespace

std::unique_ptr<PackedLinear> pack_w13_interleaved(const sdk::QuantWeight& w13, int threads) {
  const int64_t N = w13.N(), I = N / 2;
  std::vector<int32_t> source(static_cast<size_t>(N));
  for (int64_t j = 0; j < N; ++j) {
    const int64_t pair = j / (2 * kPanel), c = j % (2 * kPanel);
    source[size_t(j)] = int32_t(c < kPanel ? kPanel * pair + c : I + kPanel * pair + (c - kPanel));
  }
  return pack_linear(w13, threads, &source);
}

namespace {

class MoePrepared final : public sdk::Prepared {
 public:
  MoePrepared(MoeMode mode, std::vector<PackedExpert> experts, int64_t K, int64_t I, int64_t top_k,
              IsaLevel level, bool interleaved)
      : interleaved_(interleaved),
        mode_(mode),
        experts_(std::move(experts)),
        K_(K),
        I_(I),
        top_k_(top_k),
        level_(level),
        kernels_(micro_kernels_for(level)),
        dequant_m_(dequant_row_threshold()),
        fixed_m_(mode == MoeMode::a16 ? fixed_point_rows(level) : 0),
        fixed_stream_(fixed_point_streaming()) {
    small_m_ = streaming_row_limit(mode == MoeMode::a16, fixed_m_, fixed_stream_);
    for (const auto& e : experts_) {
      kp13_ = std::max(kp13_, e.w13->Kp);
      kp2_ = std::max(kp2_, e.w2->Kp);
      const auto& c13 = mode_ == MoeMode::a16 ? e.w13->a16_chunks : e.w13->a8_chunks;
      const auto& c2 = mode_ == MoeMode::a16 ? e.w2->a16_chunks : e.w2->a8_chunks;
      chunks13_ = std::max(chunks13_, int64_t(c13.size()));
      chunks2_ = std::max(chunks2_, int64_t(c2.size()));
      shared13_ = shared13_ && same_activation_layout(*experts_[0].w13, *e.w13);
    }
  }

  size_t bytes() const override {
    size_t total = sizeof(*this);
    for (const auto& e : experts_) total += e.w13->bytes() + e.w2->bytes();
    return total;
  }

  size_t workspace_bytes(int64_t M) const override { return layout(M).total; }

  // The steps below run in this order; each is a parallel pass over the workspace. Their plans
  // (routing, offsets, tasks, pieces) live in the calling thread's MoeScratch and the blocks of
  // the workers in their own thread_local buffers, both kept between calls: once each thread has
  // taken part in a forward of this size, a forward allocates nothing.
  void forward(const sdk::ForwardArgs& args, const sdk::Exec& exec) const override {
    if (args.M == 0) return;
    if (args.topk_ids.cols != top_k_)
      throw sdk::PluginError(NIBBLE_INVALID_ARGUMENT,
                             "forward: topk_ids has " + std::to_string(args.topk_ids.cols) +
                                 " columns, the layer's top_k is " + std::to_string(top_k_));
    thread_local MoeScratch scratch;
    Call c = start_call(args, exec, scratch);
    gather_w13_inputs(c);
    if (c.one_pass) {
      project_w13_then_w2(c);  // steps 2 to 4 in one hand-off
    } else {
      compute_gate_up(c);
      prepare_w2_inputs(c);
      project(c, Projection::w2, c.down, K_);  // step 4: the down projection, fp32
    }
    combine_slots(c);
  }

 private:
  // Workspace regions for M tokens (offsets in bytes, each 64-byte aligned).
  struct Layout {
    size_t gathered_x = 0, tokens = 0, tokens_fixed = 0, gate_up = 0, down = 0, activations = 0,
           activation_bytes = 0, total = 0;
    // w2's activation buffers beside w13's, for calls that may run both projections at once
    // (decode-sized routing, at most kStreamingRowsPerExpert rows per expert); 0 bytes otherwise.
    size_t activations2 = 0, activation2_bytes = 0;
  };
  Layout layout(int64_t M) const {
    const int64_t rows = M * top_k_;
    const int64_t used = std::min<int64_t>(rows, int64_t(experts_.size()));
    Layout l;
    size_t at = 0;
    if (shared13_) {  // the tokens prepared once for every w13
      const PackedLinear& w0 = *experts_[0].w13;
      l.tokens = at;
      at += align64(mode_ == MoeMode::a16 ? a16_workspace_bytes(w0, M) : a8_workspace_bytes(w0, M));
      if (fixed_m_ > 0) {  // and in fixed point, for the experts that take it
        l.tokens_fixed = at;
        at += align64(a16_fixed_workspace_bytes(w0, M));
      }
    } else {  // each expert's rows gathered in x's dtype, then prepared per expert
      l.gathered_x = at;
      at += align64(size_t(rows) * size_t(K_) * sizeof(float));  // room for the widest x dtype
    }
    l.gate_up = at;  // h alone when gate/up are interleaved
    at += align64(size_t(rows) * size_t((interleaved_ ? 1 : 2) * I_) * sizeof(float));
    l.down = at;
    at += align64(size_t(rows) * size_t(K_) * sizeof(float));
    l.activations = at;
    // w13's activation buffers are dead once gate/up are computed; w2's reuse the region.
    l.activation_bytes = std::max(activation_bound(mode_, kp13_, chunks13_, rows, used),
                                  activation_bound(mode_, kp2_, chunks2_, rows, used));
    at += align64(l.activation_bytes);
    if (interleaved_ && rows <= kStreamingRowsPerExpert * int64_t(experts_.size())) {
      l.activations2 = at;
      l.activation2_bytes = activation_bound(mode_, kp2_, chunks2_, rows, used);
      at += align64(l.activation2_bytes);
    }
    l.total = at;
    return l;
  }

  // One forward call: its arguments, its workspace regions and its plan.
  struct Call {
    const sdk::ForwardArgs& args;
    MoeScratch& plan;
    Layout lay;
    int threads = 1;
    int row_threads = 1;     // decode-sized row work is cheaper inline than a hand-off
    bool streaming = false;  // few rows per used expert: one contiguous run per thread
    char* ws = nullptr;
    float* gate_up = nullptr;  // interleaved: h [rows][I]; else gate/up [rows][2I], h over gate
    int64_t h_stride = 0;
    float* down = nullptr;  // [rows][K]
    char* act = nullptr;    // the activation buffers of one projection, expert by expert
    char* act2 = nullptr;   // w2's, when both projections run in one hand-off
    bool one_pass = false;  // project_w13_then_w2
    int64_t rows_of(int64_t e) const {
      return plan.routing.begin[size_t(e) + 1] - plan.routing.begin[size_t(e)];
    }
    int64_t first_row(int64_t e) const { return plan.routing.begin[size_t(e)]; }
    char* activations_of(int64_t e) const { return act + plan.offsets[size_t(e)]; }
    char* w2_activations_of(int64_t e) const { return act2 + plan.offsets2[size_t(e)]; }
  };

  const PackedLinear& weight_of(int64_t e, Projection p) const {
    return p == Projection::w13 ? *experts_[size_t(e)].w13 : *experts_[size_t(e)].w2;
  }

  // Whether an expert with n routed rows runs on the tile kernels (else the streaming ones).
  bool on_tiles(int64_t n) const { return level_ == IsaLevel::amx && n > small_m_; }
  // Whether it runs W4A16 on fixed-point activations, as a linear layer of n rows does: on the int8
  // tiles above the streaming rows, in the AVX-512 streaming kernel at and below them.
  bool fixed_point(int64_t n) const {
    return n > 0 && n <= fixed_m_ && (n > small_m_ || fixed_stream_);
  }
  // Rows of an expert's activation buffer to prepare: the tile kernels on bf16 or int8 rows read
  // whole 32-row blocks, so those padding rows are zeroed too.
  int64_t prepared_rows(int64_t n) const {
    return on_tiles(n) && !fixed_point(n) ? padded_rows(n) : n;
  }
  // Bytes of an expert's activation buffer for weight w and n rows.
  size_t activation_bytes(const PackedLinear& w, int64_t n) const {
    if (fixed_point(n)) return a16_fixed_workspace_bytes(w, n);
    return mode_ == MoeMode::a16 ? a16_workspace_bytes(w, n) : a8_workspace_bytes(w, n);
  }

  // Check the workspace, sort the routing by expert and plan the row tasks.
  Call start_call(const sdk::ForwardArgs& args, const sdk::Exec& exec, MoeScratch& plan) const {
    Call c{args, plan, layout(args.M)};
    if (exec.workspace_size < c.lay.total)
      throw sdk::PluginError(NIBBLE_INVALID_ARGUMENT, "forward: workspace too small");
    sort_by_expert(args.topk_ids, args.M, top_k_, int64_t(experts_.size()), plan.routing);
    c.threads = std::max(1, exec.num_threads);
    c.row_threads = plan.routing.rows <= kInlineRows ? 1 : c.threads;
    c.streaming = plan.routing.rows <= kStreamingRowsPerExpert * plan.routing.experts_used;
    c.ws = static_cast<char*>(exec.workspace);
    c.gate_up = reinterpret_cast<float*>(c.ws + c.lay.gate_up);
    c.h_stride = interleaved_ ? I_ : 2 * I_;
    c.down = reinterpret_cast<float*>(c.ws + c.lay.down);
    c.act = c.ws + c.lay.activations;
    c.act2 = c.ws + c.lay.activations2;
    c.one_pass = c.streaming && c.lay.activation2_bytes > 0;
    // The tile kernels read whole 32-row blocks, so their experts' padding rows are zeroed; the
    // streaming kernels read only the routed rows (at decode, zeroing 31 padding rows per expert
    // on one thread took longer than streaming the experts' weights).
    plan.fills.clear();
    for (int64_t e = 0; e < int64_t(experts_.size()); ++e) {
      const int64_t n = c.rows_of(e), end = prepared_rows(n);
      for (int64_t m0 = 0; m0 < end; m0 += kRowPad)
        plan.fills.push_back(RowTask{int32_t(e), m0, std::min(end, m0 + kRowPad)});
    }
    return c;
  }

  // Where each expert's activation buffer for projection p starts (experts without rows: none).
  void plan_activations(Call& c, Projection p) const {
    plan_activations(c, p, c.plan.offsets, c.lay.activation_bytes);
  }
  void plan_activations(const Call& c, Projection p, std::vector<size_t>& offsets,
                        size_t bound) const {
    offsets.assign(experts_.size(), 0);
    size_t at = 0;
    for (int64_t e = 0; e < int64_t(experts_.size()); ++e) {
      const int64_t n = c.rows_of(e);
      if (n == 0) continue;
      offsets[size_t(e)] = at;
      const PackedLinear& w = weight_of(e, p);
      at += align64(activation_bytes(w, n));
    }
    if (at > bound)
      throw sdk::PluginError(NIBBLE_INTERNAL, "forward: activation workspace bound exceeded");
  }

  // Cut projection p's GEMM into pieces of about equal cost (c.plan.pieces).
  void plan_gemm(Call& c, Projection p) const { plan_gemm(c, p, c.plan.pieces); }
  void plan_gemm(Call& c, Projection p, GemmPieces& pieces) const {
    c.plan.units.clear();
    for (int64_t e = 0; e < int64_t(experts_.size()); ++e) {
      const int64_t n = c.rows_of(e);
      for (int64_t m0 = 0; m0 < n; m0 += kTaskRows) {
        const int64_t m1 = std::min(n, m0 + kTaskRows);
        c.plan.units.push_back(Unit{int32_t(e), m0, m1, weight_of(e, p).panels,
                                    1.0 + kRowCostPerPanel * double(m1 - m0)});
      }
    }
    split_pieces(c.plan.units,
                 c.threads * (c.streaming ? kDecodePiecesPerThread : kPiecesPerThread), pieces);
  }

  // Prepare rows [m0, m1) of an expert's activation buffer (n rows) for weight w from `in`.
  void fill_activations(const sdk::Matrix& in, const PackedLinear& w, char* buffer, int64_t n,
                        int64_t m0, int64_t m1) const {
    if (fixed_point(n))
      a16_fixed_fill(in, w, a16_fixed_view(w, n, buffer), m0, m1, level_);
    else if (mode_ == MoeMode::a16)
      a16_fill(in, w, a16_view(w, n, buffer), m0, m1, level_);
    else
      a8_fill(in, w, a8_view(w, n, buffer), m0, m1, level_);
  }

  // Rows [m0, m1) × panels [p0, p1) of an expert's projection (n rows prepared in `buffer`) into
  // y, on the streaming or the tile micro-kernel by the expert's row count.
  void run_kernel(const PackedLinear& w, int64_t n, char* buffer, const OutputView& y, int64_t m0,
                  int64_t m1, int64_t p0, int64_t p1) const {
    const bool large = on_tiles(n);
    if (fixed_point(n)) {
      (large ? kernels_.a16_large : kernels_.a16_small)(
          fixed_point_call(&w, a16_fixed_view(w, n, buffer), y, n), m0, m1, p0, p1);
    } else if (mode_ == MoeMode::a16) {
      A16Call call{&w, a16_view(w, n, buffer), y, n};
      call.dequantize_b = n >= dequant_m_;
      (large ? kernels_.a16_large : kernels_.a16_small)(call, m0, m1, p0, p1);
    } else {
      A8Call call{&w, a8_view(w, n, buffer), y, n};
      (large ? kernels_.a8_large : kernels_.a8_small)(call, m0, m1, p0, p1);
    }
  }

  // Step 1: each expert's token rows, prepared for its w13.
  void gather_w13_inputs(Call& c) const {
    plan_activations(c, Projection::w13);
    if (shared13_)
      gather_prepared_tokens(c);
    else
      gather_then_prepare(c);
  }

  // Every w13 takes the same slot layout: convert (A16) or quantize (A8) each token once, then
  // copy its prepared row to each expert it is routed to. Experts on fixed-point activations take
  // theirs from tokens prepared once in fixed point where they have more rows than there are
  // tokens (decode: a token's row for each of its top-k experts), else from x.
  void gather_prepared_tokens(const Call& c) const {
    const sdk::Matrix& x = c.args.x;
    const int64_t M = c.args.M;
    const PackedLinear& w0 = *experts_[0].w13;
    char* tokens = c.ws + c.lay.tokens;
    int64_t fixed_rows = 0;
    bool other_rows = false;
    for (int64_t e = 0; e < int64_t(experts_.size()); ++e) {
      const int64_t n = c.rows_of(e);
      if (fixed_point(n))
        fixed_rows += n;
      else
        other_rows |= n > 0;
    }
    const bool fixed_tokens = fixed_rows > M;
    const A16FixedActivations fixed_from = a16_fixed_view(w0, M, c.ws + c.lay.tokens_fixed);
    const int64_t block = fill_block_rows(M, c.row_threads);
    run_tasks(c.row_threads, (M + block - 1) / block, [&](int64_t b) {
      const int64_t m0 = b * block, m1 = std::min(M, (b + 1) * block);
      if (fixed_tokens) a16_fixed_fill(x, w0, fixed_from, m0, m1, level_);
      if (!other_rows) return;
      if (mode_ == MoeMode::a16)  // the layout a16_gather reads, whatever M is
        a16_fill(x, w0, a16_view(w0, M, tokens), m0, m1, level_);
      else
        a8_fill(x, w0, a8_view(w0, M, tokens), m0, m1, level_);
    });
    run_tasks(c.row_threads, int64_t(c.plan.fills.size()), [&](int64_t i) {
      const RowTask& t = c.plan.fills[size_t(i)];
      const int64_t n = c.rows_of(t.expert);
      const PackedLinear& w = weight_of(t.expert, Projection::w13);
      const int64_t* source = c.plan.routing.row_token.data() + c.first_row(t.expert);
      char* buffer = c.activations_of(t.expert);
      if (fixed_point(n) && fixed_tokens)
        a16_fixed_gather(fixed_from, source, n, a16_fixed_view(w, n, buffer), t.m0, t.m1);
      else if (fixed_point(n))
        a16_fixed_fill_rows(x, source, n, w, a16_fixed_view(w, n, buffer), t.m0, t.m1, level_);
      else if (mode_ == MoeMode::a16)
        a16_gather(a16_view(w0, M, tokens), source, n, a16_view(w, n, buffer), t.m0, t.m1);
      else
        a8_gather(a8_view(w0, M, tokens), source, n, a8_view(w, n, buffer), t.m0, t.m1);
    });
  }

  // Per-expert slot layouts (act-order with different permutations): each expert's rows are
  // gathered in x's dtype, then prepared for that expert.
  void gather_then_prepare(const Call& c) const {
    const sdk::Matrix& x = c.args.x;
    const size_t xb = sdk::dtype_bytes(x.dtype);
    char* gathered = c.ws + c.lay.gathered_x;  // [rows][K] in x's dtype
    run_tasks(c.row_threads, int64_t(c.plan.fills.size()), [&](int64_t i) {
      const RowTask& t = c.plan.fills[size_t(i)];
      const int64_t n = c.rows_of(t.expert), base = c.first_row(t.expert);
      for (int64_t m = t.m0; m < std::min(t.m1, n); ++m)
        std::memcpy(gathered + size_t(base + m) * size_t(K_) * xb,
                    x.row<char>(c.plan.routing.row_token[size_t(base + m)]), size_t(K_) * xb);
      sdk::Matrix xe{gathered + size_t(base) * size_t(K_) * xb, x.dtype, n, K_, K_};
      fill_activations(xe, weight_of(t.expert, Projection::w13), c.activations_of(t.expert), n,
                       t.m0, t.m1);
    });
  }

  // Step 2: gate and up for every routed row in fp32 (h itself when the panels are interleaved).
  void compute_gate_up(Call& c) const {
    if (interleaved_)
      project_w13_silu(c);
    else
      project(c, Projection::w13, c.gate_up, 2 * I_);
  }

  // One projection's GEMM into fp32 rows of `out` (row stride ld).
  void project(Call& c, Projection p, float* out, int64_t ld) const {
    plan_gemm(c, p);
    run_pieces(c.threads, c.plan.pieces.size(), [&](int64_t i) {
      for (const GemmTask& t : c.plan.pieces[i]) {
        const PackedLinear& w = weight_of(t.expert, p);
        OutputView y{reinterpret_cast<char*>(out + c.first_row(t.expert) * ld), ld,
                     sdk::dtype_f32(), w.N};
        run_kernel(w, c.rows_of(t.expert), c.activations_of(t.expert), y, t.m0, t.m1, t.p0, t.p1);
      }
    });
  }

  // w13's GEMM with silu(gate)·up applied to each block while it is in cache: h [rows][I].
  void project_w13_silu(Call& c) const {
    plan_gemm(c, Projection::w13);
    run_pieces(c.threads, c.plan.pieces.size(), [&](int64_t i) {
      for (const GemmTask& t : c.plan.pieces[i]) run_w13_silu_segment(c, t);
    });
  }

  // One segment of w13's GEMM, silu(gate)·up applied block by block into h.
  void run_w13_silu_segment(const Call& c, const GemmTask& t) const {
    // Per thread, kept between calls: 128 KiB is above malloc's mmap threshold, and a fresh
    // mapping per piece cost page faults and zeroing on every call (seen in perf).
    thread_local std::vector<float> block;
    if (block.size() < size_t(kTaskRows * kSiluPanels * kPanel))
      block.resize(size_t(kTaskRows * kSiluPanels * kPanel));
    float* h = c.gate_up;
    const int64_t n = c.rows_of(t.expert), base = c.first_row(t.expert);
    const PackedLinear& w = *experts_[size_t(t.expert)].w13;
    char* buffer = c.activations_of(t.expert);
    for (int64_t pb = t.p0; pb < t.p1; pb += kSiluPanels) {
      const int64_t pe = std::min(t.p1, pb + kSiluPanels), ld = (pe - pb) * kPanel;
      OutputView y{reinterpret_cast<char*>(block.data()), ld, sdk::dtype_f32(), w.N};
      y.row0 = t.m0;
      y.col0 = pb * kPanel;
      run_kernel(w, n, buffer, y, t.m0, t.m1, pb, pe);
      for (int64_t m = t.m0; m < t.m1; ++m) {
        const float* v = block.data() + (m - t.m0) * ld;
        float* out = h + (base + m) * I_ + pb / 2 * kPanel;
        for (int64_t pair = 0; pair < (pe - pb) / 2; ++pair)
          for (int lane = 0; lane < kPanel; ++lane)
            out[pair * kPanel + lane] =
                silu_times(v[2 * pair * kPanel + lane], v[(2 * pair + 1) * kPanel + lane]);
      }
    }
  }

  // Decode (a few rows per expert, gate/up interleaved): steps 2 to 4 in one hand-off to the
  // pool, without the barrier between the projections. Each thread runs w13 pieces, then w2
  // pieces; the thread that finishes an expert's last w13 segment prepares that expert's w2 input
  // (into a region of its own, since other experts' w13 inputs are still being read), and a w2
  // segment waits only for its own expert. Every w13 piece is taken before any thread starts on
  // w2 (a queue is drained before the next), so a waiting thread waits for running work only.
  // The segments are the same as in the two-pass order, so the result is bit-identical.
  void project_w13_then_w2(Call& c) const {
    MoeScratch& plan = c.plan;
    const int64_t E = int64_t(experts_.size());
    plan_gemm(c, Projection::w13, plan.pieces);
    plan_gemm(c, Projection::w2, plan.pieces2);
    plan_activations(c, Projection::w2, plan.offsets2, c.lay.activation2_bytes);
    if (plan.w13_left_size < size_t(E)) {
      plan.w13_left.reset(new std::atomic<int64_t>[size_t(E)]);
      plan.w13_left_size = size_t(E);
    }
    std::atomic<int64_t>* left = plan.w13_left.get();
    for (int64_t e = 0; e < E; ++e) left[e].store(0, std::memory_order_relaxed);
    for (const auto& piece : plan.pieces)
      for (const GemmTask& t : piece) left[t.expert].fetch_add(1, std::memory_order_relaxed);
    std::atomic<bool> failed{false};
    const int64_t n13 = plan.pieces.size(), n2 = plan.pieces2.size();
    const int parts = int(std::max<int64_t>(1, std::min<int64_t>(c.threads, std::max(n13, n2))));
    ItemQueues q13(parts, n13), q2(parts, n2);
    WorkerPool::instance().run(parts, [&](int part) {
      try {
        q13.drain(part, [&](int64_t i) {
          for (const GemmTask& t : plan.pieces[i]) {
            run_w13_silu_segment(c, t);
            if (left[t.expert].fetch_sub(1, std::memory_order_acq_rel) == 1) {
              prepare_w2_input(c, t.expert);
              left[t.expert].store(-1, std::memory_order_release);  // -1: w2's input is ready
            }
          }
        });
      } catch (...) {
        failed.store(true, std::memory_order_release);  // waiters below must not wait for it
        throw;
      }
      q2.drain(part, [&](int64_t i) {
        for (const GemmTask& t : plan.pieces2[i]) {
          while (left[t.expert].load(std::memory_order_acquire) >= 0)
            if (failed.load(std::memory_order_acquire))
              return;
            else
              _mm_pause();
          const PackedLinear& w = *experts_[size_t(t.expert)].w2;
          OutputView y{reinterpret_cast<char*>(c.down + c.first_row(t.expert) * K_), K_,
                       sdk::dtype_f32(), w.N};
          run_kernel(w, c.rows_of(t.expert), c.w2_activations_of(t.expert), y, t.m0, t.m1, t.p0,
                     t.p1);
        }
      });
    });
  }

  // An expert's h rows (complete), prepared for its w2 in the second region.
  void prepare_w2_input(const Call& c, int64_t e) const {
    const int64_t n = c.rows_of(e), base = c.first_row(e);
    sdk::Matrix he{reinterpret_cast<char*>(c.gate_up + base * c.h_stride), sdk::dtype_f32(), n, I_,
                   c.h_stride};
    fill_activations(he, weight_of(e, Projection::w2), c.w2_activations_of(e), n, 0,
                     prepared_rows(n));
  }

  // Step 3: h = silu(gate) · up in fp32 (unless step 2 made it), prepared for w2.
  void prepare_w2_inputs(Call& c) const {
    plan_activations(c, Projection::w2);
    run_tasks(c.row_threads, int64_t(c.plan.fills.size()), [&](int64_t i) {
      const RowTask& t = c.plan.fills[size_t(i)];
      const int64_t n = c.rows_of(t.expert), base = c.first_row(t.expert);
      if (!interleaved_)
        for (int64_t m = t.m0; m < std::min(t.m1, n); ++m) {
          float* g = c.gate_up + (base + m) * 2 * I_;
          for (int64_t col = 0; col < I_; ++col) g[col] = silu_times(g[col], g[I_ + col]);
        }
      sdk::Matrix he{reinterpret_cast<char*>(c.gate_up + base * c.h_stride), sdk::dtype_f32(), n,
                     I_, c.h_stride};
      fill_activations(he, weight_of(t.expert, Projection::w2), c.activations_of(t.expert), n, t.m0,
                       t.m1);
    });
  }

  // Step 5: y[m] = Σ_j weight[m, j] · down[row of (m, j)], in slot order, fp32, rounded once.
  void combine_slots(const Call& c) const {
    const sdk::ForwardArgs& a = c.args;
    const int64_t M = a.M;
    run_tasks(c.row_threads, (M + kCombineRows - 1) / kCombineRows, [&](int64_t b) {
      thread_local std::vector<float> acc;
      acc.resize(size_t(K_));
      for (int64_t m = b * kCombineRows; m < std::min(M, (b + 1) * kCombineRows); ++m) {
        std::fill(acc.begin(), acc.end(), 0.f);
        for (int64_t j = 0; j < top_k_; ++j) {
          const int64_t r = c.plan.routing.slot_row[size_t(m * top_k_ + j)];
          if (r < 0) continue;
          const float weight = a.topk_weights.get(m, j);
          const float* d = c.down + r * K_;
          for (int64_t k = 0; k < K_; ++k) acc[size_t(k)] += weight * d[k];
        }
        store_row(a.y, m, acc.data());
      }
    });
  }

  bool interleaved_;  ///< w13's gate and up panels alternate (pack_w13_interleaved)
  MoeMode mode_;
  std::vector<PackedExpert> experts_;
  int64_t K_, I_, top_k_;
  IsaLevel level_;
  MicroKernels kernels_;
  int64_t small_m_;
  int64_t dequant_m_;
  int64_t fixed_m_;
  bool fixed_stream_;
  int64_t kp13_ = 0, kp2_ = 0, chunks13_ = 0, chunks2_ = 0;
  bool shared13_ = true;  ///< every expert's w13 takes the same activation slot layout
};

}  // namespace

std::unique_ptr<sdk::Prepared> make_moe_prepared(MoeMode mode, std::vector<PackedExpert> experts,
                                                 int64_t K, int64_t I, int64_t top_k,
                                                 IsaLevel level, bool interleaved) {
  return std::make_unique<MoePrepared>(mode, std::move(experts), K, I, top_k, level, interleaved);
}

}  // namespace nibble::cpu_amx
