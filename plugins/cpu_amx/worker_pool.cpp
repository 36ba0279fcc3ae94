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

void WorkerPool::worker_main(Slot* slot, int part) {
  // The value the slot was made with: a call may bump it before this thread first runs.
  uint32_t seen = 0;
  for (;;) {
    const auto spin = std::chrono::nanoseconds(spin_ns_.load(std::memory_order_relaxed));
    auto since = std::chrono::steady_clock::now();
    uint32_t now_seq;
    for (unsigned n = 1; (now_seq = slot->seq.load(std::memory_order_acquire)) == seen; ++n) {
      _mm_pause();
      if (n % 64 != 0 || std::chrono::steady_clock::now() - since < spin) continue;
      // Announce, then sleep unless a call came in meanwhile; the caller bumps seq before it
      // reads `parked` (both sequentially consistent), so no wake-up is lost.
      slot->parked.store(1, std::memory_order_seq_cst);
      slot->seq.wait(seen, std::memory_order_seq_cst);
      slot->parked.store(0, std::memory_order_relaxed);
      since = std::chrono::steady_clock::now();
    }
    seen = now_seq;
    if (slot->stop) return;
    // A job the caller has already revoked (it found the work done) is skipped.
    Job* job = slot->job.exchange(nullptr, std::memory_order_acq_rel);
    if (!job) continue;
    run_part(*job, part);
    job->pending.fetch_sub(1, std::memory_order_release);
  }
}

void WorkerPool::grow(int workers) {
  while (int(threads_.size()) < workers) {
    slots_.push_back(std::make_unique<Slot>());
    Slot* slot = slots_.back().get();
    const int part = int(threads_.size()) + 1;
    threads_.emplace_back([this, slot, part] { worker_main(slot, part); });
    pthread_setname_np(threads_.back().native_handle(), "nibble-cpu-amx");
  }
}

void WorkerPool::run_erased(int parts, Call call, const void* fn) {
  // Concurrent calls take turns: each wants every core, and a part may wait for its siblings
  // (a barrier), so the parts of one call must all run at once.
  std::lock_guard<std::mutex> lock(busy_);
  Job job;
  job.call = call;
  job.fn = fn;
  grow(parts - 1);
  job.pending.store(parts - 1, std::memory_order_relaxed);
  // Publish to every worker before the first wake-up system call, so spinning workers start at
  // once. Waking parked ones from the caller in a row was faster than a tree in which each woken
  // worker wakes two more (AMX host, 16 threads, 2 ms between calls: 2048x2048 M = 1 73 against
  // 96 us): a woken vCPU takes longer to run than a system call takes to issue.
  for (int i = 0; i < parts - 1; ++i) {
    Slot& slot = *slots_[size_t(i)];
    slot.job.store(&job, std::memory_order_release);
    slot.seq.fetch_add(1, std::memory_order_seq_cst);
  }
  for (int i = 0; i < parts - 1; ++i) {
    Slot& slot = *slots_[size_t(i)];
    if (slot.parked.load(std::memory_order_seq_cst)) slot.seq.notify_one();
  }
  run_part(job, 0);
  // No item is left to take: a worker that has not taken the job yet will not.
  for (int i = 0; i < parts - 1; ++i)
    if (slots_[size_t(i)]->job.exchange(nullptr, std::memory_order_acq_rel) == &job)
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
  for (auto& slot : slots_) {
    slot->stop = true;
    slot->seq.fetch_add(1, std::memory_order_seq_cst);
    slot->seq.notify_one();
  }
  for (auto& t : threads_) t.join();
  threads_.clear();
  slots_.clear();
}

}  // namespace nibble::cpu_amx
