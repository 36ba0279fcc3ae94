// How the fused MoE orders and splits its work: the (token, slot) pairs sorted by expert, each
// projection's GEMM cut into pieces of equal estimated cost, and the runners that hand pieces or
// tasks to the worker pool. Nothing here depends on the ISA or on values, only on the routing and
// the shapes, so the plan never changes a result (moe_kernel.cpp explains the determinism).
#pragma once

#include <nibble/sdk/plugin.hpp>

#include "worker_pool.hpp"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace nibble::cpu_amx {

/// The (token, slot) pairs sorted by expert (counting sort; stable in token-then-slot order).
struct SortedRouting {
  std::vector<int64_t> begin;      ///< [E + 1]: rows of expert e are [begin[e], begin[e + 1])
  std::vector<int64_t> row_token;  ///< [rows]: the token of each sorted row
  std::vector<int64_t> slot_row;   ///< [M · top_k]: the sorted row of each slot, -1 for none
  std::vector<int64_t> next;       ///< [E]: the sort's insertion points
  int64_t rows = 0;
  int64_t experts_used = 0;
};

/// Counting sort of the M × top_k ids (−1: no expert) into `out`, reusing its vectors' capacity;
/// an id outside [−1, E) is an error that names the slot.
void sort_by_expert(const sdk::Matrix& ids, int64_t M, int64_t top_k, int64_t E,
                    SortedRouting& out);

/// One (expert, row block, panel range) segment of a projection.
struct GemmTask {
  int32_t expert;
  int64_t m0, m1, p0, p1;
};

/// A projection's GEMM work as `count` pieces of about equal cost, each a run of segments in
/// (expert, row block, panel) order, cut on even panels (the streaming kernels walk panel pairs).
/// One hot expert is cut across pieces like any other (skewed routing stays balanced). Which piece
/// computes an element never changes its value, so the plan is free to depend on the thread count.
/// A Unit is one (expert, row block) over all its panels, with its cost per panel.
struct Unit {
  int32_t expert;
  int64_t m0, m1, panels;
  double cost;  // per panel
};

/// A projection's pieces. The first size() lists are this plan's; lists past them are kept (with
/// their capacity) for a later plan with more pieces.
class GemmPieces {
 public:
  /// The number of pieces.
  int64_t size() const { return count_; }
  /// Piece i's segments.
  const std::vector<GemmTask>& operator[](int64_t i) const { return lists_[size_t(i)]; }
  const std::vector<GemmTask>* begin() const { return lists_.data(); }
  const std::vector<GemmTask>* end() const { return lists_.data() + count_; }
  /// Make `count` empty pieces.
  void reset(int64_t count) {
    if (lists_.size() < size_t(count)) lists_.resize(size_t(count));
    for (int64_t i = 0; i < count; ++i) lists_[size_t(i)].clear();
    count_ = count;
  }
  /// Append a segment to piece i.
  void add(int64_t i, const GemmTask& t) { lists_[size_t(i)].push_back(t); }

 private:
  std::vector<std::vector<GemmTask>> lists_;
  int64_t count_ = 0;
};

/// Cut `units` into max(1, count) pieces, into `out`.
void split_pieces(const std::vector<Unit>& units, int64_t count, GemmPieces& out);

/// Run fn(i) for i in [0, count) on the worker pool: thread p first takes its own share of the
/// pieces (with one piece per thread, each keeps its weight stream), then pieces others have not
/// taken. Any thread may take any i: each one's result does not depend on who runs it.
template <class Fn>
inline void run_pieces(int threads, int64_t count, const Fn& fn) {
  WorkerPool::instance().for_each(threads, count, fn);
}

/// Independent tasks handed out dynamically.
template <class Fn>
inline void run_tasks(int threads, int64_t count, const Fn& fn) {
  run_pieces(threads, count, fn);
}

}  // namespace nibble::cpu_amx
