// A `Parallel` policy for portable_gemm.hpp / portable_moe.hpp on oneTBB: an arena per call, sized
// by the call's thread count and capped by the host's thread budget, so concurrent calls never
// share scratch or exceed what the host allows. Optional: a plugin that includes it links oneTBB
// (TBB::tbb).
#pragma once

#include "plugin.hpp"

#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/task_arena.h>

#include <algorithm>
#include <cstdint>
#include <optional>

namespace nibble::sdk::portable {

/// Runs f(0 .. count-1) on up to `threads` threads (serially for one thread).
class TbbParallel {
 public:
  /// Threads for this call: the call's request, capped by the host's budget.
  explicit TbbParallel(int requested)
      : threads_(std::max(1, std::min(requested, Host::thread_budget()))) {
    if (threads_ > 1) arena_.emplace(threads_);
  }

  /// Run f(i) for every i in [0, count).
  template <class F>
  void operator()(int64_t count, F&& f) const {
    if (count <= 0) return;
    if (!arena_ || count == 1) {
      for (int64_t i = 0; i < count; ++i) f(i);
      return;
    }
    arena_->execute([&] { tbb::parallel_for(int64_t(0), count, [&](int64_t i) { f(i); }); });
  }

  /// Threads this call may use.
  int threads() const { return threads_; }

 private:
  int threads_;
  mutable std::optional<tbb::task_arena> arena_;  // execute() is not const; the arena is ours
};

}  // namespace nibble::sdk::portable
