// The threads every cpu_amx forward runs on: one process-wide pool of persistent workers that,
// after a call, spin for a bounded time (the "block time" of OpenMP runtimes) and then park on a
// futex. On 16 cores a call costs what waking the workers costs: parked workers take several
// microseconds each to wake, spinning ones under one; a pool that spins forever would steal the
// cores of whatever runs next, so the spin ends after NIBBLE_CPU_AMX_SPIN_US microseconds
// (docs/cpu_amx.md has the measurements behind the default).
//
// A call runs part 0 on the calling thread and parts 1.. on workers 1.., all at once (a part may
// wait at a barrier for its siblings), so a thread keeps the same part (and so the same slice of
// the weight) from call to call. One call at a time: concurrent callers (forward may run
// concurrently on one handle) take turns. A part must not call run() itself.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace nibble::cpu_amx {

class WorkerPool {
 public:
  /// The process-wide pool; its workers start on first use and it grows to the largest part
  /// count asked for. Never destroyed (the host may call shutdown after static destructors).
  static WorkerPool& instance();

  /// Run fn(part) for every part in [0, parts) at once, part 0 on the caller; returns when all
  /// have finished. The first exception a part throws is rethrown here after all parts finish.
  template <class Fn>
  void run(int parts, const Fn& fn) {
    if (parts <= 1) {
      if (parts == 1) fn(0);
      return;
    }
    run_erased(
        parts, [](const void* f, int part) { (*static_cast<const Fn*>(f))(part); }, &fn);
  }

  /// fn(i) for every i in [0, count), handed out dynamically to `parts` threads (part 0 the
  /// caller). Which thread runs an item must not change its result.
  template <class Fn>
  void run_dynamic(int parts, int64_t count, const Fn& fn) {
    if (count <= 0) return;
    if (parts <= 1 || count == 1) {
      for (int64_t i = 0; i < count; ++i) fn(i);
      return;
    }
    std::atomic<int64_t> next{0};
    run(int(std::min<int64_t>(parts, count)), [&](int) {
      for (int64_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < count;) fn(i);
    });
  }

  /// Microseconds a worker spins for the next call before it parks (0: park at once).
  void set_spin_microseconds(int64_t us) { spin_ns_.store(us * 1000, std::memory_order_relaxed); }
  int64_t spin_microseconds() const { return spin_ns_.load(std::memory_order_relaxed) / 1000; }

  /// Stop and join every worker (the backend's shutdown; no call may be in flight). A later call
  /// starts them again.
  void stop();

  /// Workers started so far (not counting callers).
  int workers() const;

 private:
  using Call = void (*)(const void*, int);
  // One call's job, on the caller's stack; workers see it through their slot.
  struct Job {
    Call call = nullptr;
    const void* fn = nullptr;
    std::atomic<int> pending{0};
    std::exception_ptr error;
    std::mutex error_mutex;
  };
  // One worker's mailbox on its own cache line: the caller writes `job`, then bumps `seq`; the
  // worker spins on `seq`, and once its spin time is up it sets `parked` and sleeps on `seq`.
  struct alignas(64) Slot {
    std::atomic<uint32_t> seq{0};
    std::atomic<int> parked{0};
    Job* job = nullptr;
    bool stop = false;
  };

  WorkerPool();
  void run_erased(int parts, Call call, const void* fn);
  void grow(int workers);
  void worker_main(Slot* slot, int part);
  static void run_part(Job& job, int part);

  mutable std::mutex busy_;                   // held by the one call in flight (and by grow/stop)
  std::vector<std::unique_ptr<Slot>> slots_;  // slot i serves part i + 1
  std::vector<std::thread> threads_;
  std::atomic<int64_t> spin_ns_;
};

}  // namespace nibble::cpu_amx
