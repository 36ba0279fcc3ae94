// The worker pool under the linear and MoE kernels: every item runs exactly once whatever the
// part count, late workers are skipped without losing items, errors reach the caller, and
// concurrent callers take turns.
#include <gtest/gtest.h>

#include "worker_pool.hpp"

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

namespace nibble::cpu_amx {
namespace {

TEST(WorkerPool, EveryItemRunsExactlyOnceForAnyPartCount) {
  WorkerPool& pool = WorkerPool::instance();
  for (int parts : {1, 2, 3, 7, 16, 40}) {
    for (int64_t count : {int64_t(1), int64_t(5), int64_t(64), int64_t(1000)}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(count));
      pool.for_each(parts, count, [&](int64_t i) { hits[size_t(i)].fetch_add(1); });
      for (int64_t i = 0; i < count; ++i)
        ASSERT_EQ(hits[size_t(i)].load(), 1) << "item " << i << ", parts " << parts;
    }
  }
}

TEST(WorkerPool, ManyBackToBackCallsLoseNothing) {
  WorkerPool& pool = WorkerPool::instance();
  std::atomic<int64_t> sum{0};
  for (int call = 0; call < 3000; ++call)
    pool.for_each(8, 16, [&](int64_t i) { sum.fetch_add(i + 1, std::memory_order_relaxed); });
  EXPECT_EQ(sum.load(), 3000 * (16 * 17 / 2));
}

// Every worker polls one published call; a worker that is not one of a call's parts, or comes too
// late (also after the next call has started), must stay out of it, and a call returns only once
// every part that started has ended, also when the calls alternate in size and the workers park
// between them (a spin of 0).
TEST(WorkerPool, EachCallRunsEachOfItsPartsAtMostOnceAndNoOther) {
  WorkerPool& pool = WorkerPool::instance();
  const int64_t spin = pool.spin_microseconds();
  // Outside the calls, so that a part running late cannot touch a finished call's stack.
  std::vector<std::atomic<int>> ran(16);
  std::atomic<int> running{0};
  for (int64_t us : {int64_t(100), int64_t(0)}) {
    pool.set_spin_microseconds(us);
    for (int call = 0; call < 2000; ++call) {
      const int parts = call % 3 == 0 ? 16 : 2 + call % 5;
      for (auto& r : ran) r.store(0);
      std::atomic<int> items{0};
      ItemQueues queues(parts, 4 * parts);
      pool.run(parts, [&](int part) {
        running.fetch_add(1);
        ran[size_t(part)].fetch_add(1);
        queues.drain(part, [&](int64_t) { items.fetch_add(1); });
        running.fetch_sub(1);
      });
      ASSERT_EQ(running.load(), 0) << "a part of call " << call << " outlived it";
      ASSERT_EQ(items.load(), 4 * parts) << "call " << call;
      ASSERT_EQ(ran[0].load(), 1) << "call " << call;
      for (int p = 1; p < 16; ++p)
        ASSERT_LE(ran[size_t(p)].load(), p < parts ? 1 : 0) << "call " << call << ", part " << p;
    }
  }
  pool.set_spin_microseconds(spin);
}

TEST(WorkerPool, ParkedWorkersWakeForTheNextCall) {
  WorkerPool& pool = WorkerPool::instance();
  const int64_t spin = pool.spin_microseconds();
  pool.set_spin_microseconds(0);
  for (int call = 0; call < 50; ++call) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));  // every worker parks
    std::atomic<int> n{0};
    pool.for_each(4, 100, [&](int64_t) { n.fetch_add(1); });
    ASSERT_EQ(n.load(), 100);
  }
  pool.set_spin_microseconds(spin);
}

TEST(WorkerPool, TheCallerTakesOverTheItemsOfASlowWorker) {
  // Part 1 sleeps before it takes anything; the caller must finish all items meanwhile.
  WorkerPool& pool = WorkerPool::instance();
  std::atomic<int> n{0};
  ItemQueues queues(2, 200);
  pool.run(2, [&](int part) {
    if (part == 1) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    queues.drain(part, [&](int64_t) { n.fetch_add(1); });
  });
  EXPECT_EQ(n.load(), 200);
}

TEST(WorkerPool, AnExceptionInAPartReachesTheCaller) {
  WorkerPool& pool = WorkerPool::instance();
  EXPECT_THROW(pool.for_each(4, 64,
                             [](int64_t i) {
                               if (i == 50) throw std::runtime_error("item 50");
                             }),
               std::runtime_error);
  std::atomic<int> n{0};  // and the pool still works
  pool.for_each(4, 64, [&](int64_t) { n.fetch_add(1); });
  EXPECT_EQ(n.load(), 64);
}

TEST(WorkerPool, ConcurrentCallersTakeTurnsAndAllFinish) {
  std::vector<std::thread> callers;
  std::atomic<int64_t> total{0};
  for (int c = 0; c < 4; ++c)
    callers.emplace_back([&] {
      for (int call = 0; call < 200; ++call)
        WorkerPool::instance().for_each(4, 32, [&](int64_t) { total.fetch_add(1); });
    });
  for (auto& t : callers) t.join();
  EXPECT_EQ(total.load(), 4 * 200 * 32);
}

TEST(WorkerPool, StopsAndStartsAgain) {
  WorkerPool& pool = WorkerPool::instance();
  pool.for_each(4, 8, [](int64_t) {});
  EXPECT_GE(pool.workers(), 3);
  pool.stop();
  EXPECT_EQ(pool.workers(), 0);
  std::atomic<int> n{0};
  pool.for_each(4, 8, [&](int64_t) { n.fetch_add(1); });
  EXPECT_EQ(n.load(), 8);
}

}  // namespace
}  // namespace nibble::cpu_amx
