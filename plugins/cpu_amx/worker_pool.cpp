#include "worker_pool.hpp"

#include <nibble/sdk/env.hpp>

#include <immintrin.h>
#include <pthread.h>

#include <chrono>

namespace nibble::cpu_amx {
namespace {

// Measured on the AMX host (docs/cpu_amx.md#threads): back-to-back calls find every worker
// spinning well within this; a gap longer than it costs one futex wake-up per worker.
constexpr int64_t kDefaultSpinMicroseconds = 100;
constexpr int64_t kMaxSpinMicroseconds = 1000000;

int64_t spin_from_environment() {
  return sdk::env_integer("NIBBLE_CPU_AMX_SPIN_US", 0, kMaxSpinMicroseconds)
      .value_or(kDefaultSpinMicroseconds);
}

}  // namespace

WorkerPool& WorkerPool::instance() {
  static WorkerPool* pool = new WorkerPool;
  return *pool;
}

WorkerPool::WorkerPool() : spin_ns_(spin_from_environment() * 1000) {}

int WorkerPool::workers() const {
  std::lock_guard<std::mutex> lock(busy_);
  return int(threads_.size());
}

void WorkerPool::run_part(Job& job, int part) {
  try {
    job.call(job.fn, part);
  } catch (...) {
    std::lock_guard<std::mutex> lock(job.error_mutex);
    if (!job.error) job.error = std::current_exception();
  }
}

void WorkerPool::worker_main(Slot* slot, int part, uint64_t seen) {
  // The spin time counts from the last call this worker ran: calls it is not part of neither
  // keep it spinning nor wake it, so a run of small calls leaves the other cores alone.
  auto since = std::chrono::steady_clock::now();
  for (;;) {
    const auto spin = std::chrono::nanoseconds(spin_ns_.load(std::memory_order_relaxed));
    uint64_t word;
    for (unsigned n = 1; (word = call_.word.load(std::memory_order_acquire)) == seen; ++n) {
      _mm_pause();
      if (n % 64 != 0 || std::chrono::steady_clock::now() - since < spin) continue;
      // Announce, then sleep unless a call came in meanwhile. The caller stores `word`, then
      // reads `parked` (both sequentially consistent): either this check sees the call, or the
      // caller sees `parked` and bumps `wake`, read before, so the futex does not sleep through it.
      const uint32_t wake = slot->wake.load(std::memory_order_relaxed);
      slot->parked.store(1, std::memory_order_seq_cst);
      if (call_.word.load(std::memory_order_seq_cst) == seen)
        slot->wake.wait(wake, std::memory_order_seq_cst);
      slot->parked.store(0, std::memory_order_relaxed);
    }
    seen = word;
    if (call_.stop.load(std::memory_order_acquire)) return;
    if (int64_t(word & kPartMask) <= part) continue;  // not one of this call's parts
    // Take this call's part, unless the caller has revoked it (it found the work done) or a later
    // call's caller has: words only grow, and a worker may come to a call it saw late after its
    // caller and the next one have moved on. A part taken keeps the caller waiting, so `job` is
    // still this call's.
    uint64_t last = slot->taken.load(std::memory_order_relaxed);
    bool mine = false;
    while (last < word &&
           !(mine = slot->taken.compare_exchange_weak(last, word, std::memory_order_acq_rel,
                                                      std::memory_order_relaxed))) {
    }
    if (!mine) continue;
    Job* job = call_.job.load(std::memory_order_acquire);
    run_part(*job, part);
    job->pending.fetch_sub(1, std::memory_order_release);
    since = std::chrono::steady_clock::now();
  }
}

void WorkerPool::grow(int workers) {
  while (int(threads_.size()) < workers) {
    // Slot i serves part i + 1: a slot is appended only once its thread runs, and the appends
    // cannot throw after that (room reserved first), so a failed thread creation leaves the
    // slots and threads in step and the call fails before it is published.
    slots_.reserve(slots_.size() + 1);
    threads_.reserve(threads_.size() + 1);
    auto slot = std::make_unique<Slot>();
    const int part = int(threads_.size()) + 1;
    // The word before this call's: the new worker takes this call too.
    const uint64_t seen = call_.word.load(std::memory_order_relaxed);
    slot->taken.store(seen, std::memory_order_relaxed);
    Slot* s = slot.get();
    std::thread worker([this, s, part, seen] { worker_main(s, part, seen); });
    pthread_setname_np(worker.native_handle(), "nibble-cpu-amx");
    slots_.push_back(std::move(slot));
    threads_.push_back(std::move(worker));
  }
}

void WorkerPool::publish(uint64_t word, int workers) {
  call_.word.store(word, std::memory_order_seq_cst);
  // Parked workers are woken by the caller, one system call each, after the spinning ones have
  // the call. Waking them from the caller was faster than a tree in which each woken worker wakes
  // two more (AMX host, 16 threads, 2 ms between calls: 2048x2048 M = 1 73 against 96 us): a
  // woken vCPU takes longer to run than a system call takes to issue.
  for (int i = 0; i < workers; ++i) {
    Slot& slot = *slots_[size_t(i)];
    if (slot.parked.load(std::memory_order_seq_cst)) {
      slot.wake.fetch_add(1, std::memory_order_seq_cst);
      slot.wake.notify_one();
    }
  }
}

uint64_t WorkerPool::next_word(int parts) const {
  return ((call_.word.load(std::memory_order_relaxed) >> kPartBits) + 1) << kPartBits |
         uint64_t(parts);
}

void WorkerPool::run_erased(int parts, Call call, const void* fn) {
  // Concurrent calls take turns: each wants every core, and a part may wait for its siblings
  // (a barrier), so the parts of one call must all run at once.
  std::lock_guard<std::mutex> lock(busy_);
  // A part count the word cannot hold runs on as many parts as it can: the work is shared
  // through queues, so fewer parts only take longer.
  parts = int(std::min<uint64_t>(uint64_t(parts), kPartMask));
  Job job;
  job.call = call;
  job.fn = fn;
  grow(parts - 1);
  job.pending.store(parts - 1, std::memory_order_relaxed);
  call_.job.store(&job, std::memory_order_relaxed);
  const uint64_t word = next_word(parts);
  publish(word, parts - 1);
  run_part(job, 0);
  // No item is left to take: a worker that has not taken the call yet will not.
  for (int i = 0; i < parts - 1; ++i)
    if (slots_[size_t(i)]->taken.exchange(word, std::memory_order_acq_rel) != word)
      job.pending.fetch_sub(1, std::memory_order_relaxed);
  for (unsigned n = 0; job.pending.load(std::memory_order_acquire) != 0; ++n) {
    if (n < (1u << 14))
      _mm_pause();
    else
      std::this_thread::yield();
  }
  if (job.error) std::rethrow_exception(job.error);
}

void WorkerPool::stop() {
  std::lock_guard<std::mutex> lock(busy_);
  call_.stop.store(true, std::memory_order_release);
  publish(next_word(0), int(slots_.size()));
  for (auto& t : threads_) t.join();
  threads_.clear();
  slots_.clear();
  call_.stop.store(false, std::memory_order_relaxed);
}

}  // namespace nibble::cpu_amx
