// The threads every cpu_amx forward runs on: one process-wide pool of persistent workers that,
// after a call, spin for a bounded time (the "block time" of OpenMP runtimes) and then park on a
// futex. On 16 cores a call costs what waking the workers costs: parked workers take several
// microseconds each to wake, spinning ones under one; a pool that spins forever would steal the
// cores of whatever runs next, so the spin ends after NIBBLE_CPU_AMX_SPIN_US microseconds
// (docs/cpu_amx.md has the measurements behind the default).
//
// Work is shared, not assigned: a call's threads take items from per-thread queues, each first
// its own (so a thread keeps the same slice of the weight from call to call), then whatever the
// others left. When the caller finds no item left, workers that have not yet joined the call are
// skipped. On a machine whose cores are shared (a VM, other processes), a worker the OS has
// descheduled for a time slice then delays nobody, where a static split would make the whole
// call wait for it.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <thread>
#include <type_traits>
#include <vector>

namespace nibble::cpu_amx {

class WorkerPool {
 public:
  /// The process-wide pool; its workers start on first use and it grows to the largest part
  /// count asked for. Never destroyed (the host may call shutdown after static destructors).
  static WorkerPool& instance();

  /// Run fn(part) on the caller (part 0) and on up to parts − 1 workers. fn must share its work
  /// through a queue (ItemQueues) and return only when no item is left to take; once fn(0)
  /// returns, parts that have not started are skipped, and run returns when the started ones
  /// finish. The first exception a part throws is rethrown here. fn must not call run itself.
  template <class Fn>
  void run(int parts, const Fn& fn) {
    if (parts <= 1) {
      if (parts == 1) fn(0);
      return;
    }
    run_erased(
        parts, [](const void* f, int part) { (*static_cast<const Fn*>(f))(part); }, &fn);
  }

  /// fn(i) for every i in [0, count) on up to `parts` threads: thread p first takes the items
  /// [count·p/parts, count·(p+1)/parts) in order, then items the others have not taken. Which
  /// thread runs an item must not change its result.
  template <class Fn>
  void for_each(int parts, int64_t count, const Fn& fn);

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
  // One call's job, on the caller's stack; a worker reads it only after taking its part.
  struct Job {
    Call call = nullptr;
    const void* fn = nullptr;
    std::atomic<int> pending{0};
    std::exception_ptr error;
    std::mutex error_mutex;
  };
  // The call every spinning worker polls, on one cache line: the caller stores `job`, then
  // `word`, the call's number and its part count in one value, so spinning workers all see it at
  // about the same time and a worker reads whether it is one of the call's parts together with
  // the call (64 bits, so that a call's number never comes round again). With a mailbox per
  // worker, written one after another, the 15th worker of 16 threads started 1.8 µs into a
  // call (docs/cpu_amx.md, Threads).
  struct alignas(64) Broadcast {
    std::atomic<uint64_t> word{0};
    std::atomic<Job*> job{nullptr};
    std::atomic<bool> stop{false};
  };
  static constexpr int kPartBits = 16;
  static constexpr uint64_t kPartMask = (uint64_t(1) << kPartBits) - 1;
  // One worker's own line. `taken`: the word of the last call it took, or that the caller
  // revoked for it (whoever exchanges the call's word in first decides). A worker whose spin time
  // is up sets `parked` and sleeps on `wake`, so a call wakes only its own parts.
  struct alignas(64) Slot {
    std::atomic<uint64_t> taken{0};
    std::atomic<uint32_t> wake{0};
    std::atomic<int> parked{0};
  };

  WorkerPool();
  void run_erased(int parts, Call call, const void* fn);
  void grow(int workers);
  // Store a call's word and wake those of its first `workers` workers that are parked; the
  // caller holds busy_.
  void publish(uint64_t word, int workers);
  // The word of the next call, with `parts` parts.
  uint64_t next_word(int parts) const;
  void worker_main(Slot* slot, int part, uint64_t seen);
  static void run_part(Job& job, int part);

  mutable std::mutex busy_;  // held by the one call in flight (and by grow/stop)
  Broadcast call_;
  std::vector<std::unique_ptr<Slot>> slots_;  // slot i serves part i + 1
  std::vector<std::thread> threads_;
  std::atomic<int64_t> spin_ns_;
};

/// Per-thread queues of item indices for one call: owner p holds [count·p/owners,
/// count·(p+1)/owners); take(p) hands out the next of p's items, or −1 when p has none left.
/// Up to kInline owners live in the object itself (on the caller's stack, only the owners' cache
/// lines touched), so a forward on up to 256 threads allocates nothing; more owners take the heap.
class ItemQueues {
 public:
  ItemQueues(int owners, int64_t count) : owners_(owners) {
    if (owners > kInline) {
      heap_.reset(new Queue[size_t(owners)]);
      queues_ = heap_.get();
    } else {
      for (int p = 0; p < owners; ++p) new (inline_ + size_t(p) * sizeof(Queue)) Queue;
      queues_ = std::launder(reinterpret_cast<Queue*>(inline_));
    }
    for (int p = 0; p < owners; ++p) {
      queues_[p].next.store(count * p / owners, std::memory_order_relaxed);
      queues_[p].end = count * (p + 1) / owners;
    }
  }
  ItemQueues(const ItemQueues&) = delete;
  ItemQueues& operator=(const ItemQueues&) = delete;
  int owners() const { return owners_; }
  int64_t take(int owner) {
    Queue& q = queues_[owner];
    if (q.next.load(std::memory_order_relaxed) >= q.end) return -1;
    const int64_t i = q.next.fetch_add(1, std::memory_order_relaxed);
    return i < q.end ? i : -1;
  }
  /// Run fn(i) for every item this thread can take: its own queue first, then the others'.
  template <class Fn>
  void drain(int part, const Fn& fn) {
    for (int k = 0; k < owners_; ++k) {
      const int owner = (part + k) % owners_;
      for (int64_t i; (i = take(owner)) >= 0;) fn(i);
    }
  }

 private:
  struct alignas(64) Queue {
    std::atomic<int64_t> next{0};
    int64_t end = 0;
  };
  static_assert(std::is_trivially_destructible_v<Queue>, "inline queues are never destroyed");
  static constexpr int kInline = 256;
  int owners_;
  Queue* queues_;
  std::unique_ptr<Queue[]> heap_;
  // Raw storage: constructing all kInline queues would write 16 KiB per call.
  alignas(64) unsigned char inline_[kInline * sizeof(Queue)];
};

template <class Fn>
void WorkerPool::for_each(int parts, int64_t count, const Fn& fn) {
  if (count <= 0) return;
  parts = int(std::min<int64_t>(std::max(parts, 1), count));
  if (parts == 1) {
    for (int64_t i = 0; i < count; ++i) fn(i);
    return;
  }
  ItemQueues queues(parts, count);
  run(parts, [&](int part) { queues.drain(part, fn); });
}

}  // namespace nibble::cpu_amx
