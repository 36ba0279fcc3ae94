// The replaced global operator new and delete behind counting_new.hpp.
#include "counting_new.hpp"

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <new>

namespace {

std::atomic<bool> g_counting{false};
thread_local bool t_counting = false;
std::atomic<long> g_allocations{0};

void* counted(std::size_t size, std::size_t alignment) {
  if (t_counting || g_counting.load(std::memory_order_relaxed))
    g_allocations.fetch_add(1, std::memory_order_relaxed);
  size = size ? size : 1;
  void* p = alignment > alignof(std::max_align_t)
                ? std::aligned_alloc(alignment, (size + alignment - 1) / alignment * alignment)
                : std::malloc(size);
  if (!p) throw std::bad_alloc();
  return p;
}

}  // namespace

void* operator new(std::size_t size) { return counted(size, 0); }
void* operator new[](std::size_t size) { return counted(size, 0); }
void* operator new(std::size_t size, std::align_val_t a) { return counted(size, size_t(a)); }
void* operator new[](std::size_t size, std::align_val_t a) { return counted(size, size_t(a)); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }

namespace nibble::test {

void start_counting_allocations(CountOn where) {
  g_allocations = 0;
  if (where == CountOn::every_thread)
    g_counting = true;
  else
    t_counting = true;
}

long stop_counting_allocations() {
  g_counting = false;
  t_counting = false;
  return g_allocations.load();
}

}  // namespace nibble::test
