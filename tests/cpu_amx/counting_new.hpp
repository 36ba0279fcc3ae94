// Allocation counting for the tests that check a warm forward allocates nothing: the test binary
// links counting_new.cpp, which replaces the global operator new and counts every allocation made
// on any thread (the plugin's and its workers' included) while counting is on.
#pragma once

namespace nibble::test {

/// Where allocations count: on every thread, or only on the thread that starts counting (what a
/// call makes on its caller's thread, apart from what its workers make).
enum class CountOn { every_thread, this_thread };

/// Starts counting allocations from zero.
void start_counting_allocations(CountOn where = CountOn::every_thread);

/// Stops counting; returns the allocations made since start_counting_allocations().
long stop_counting_allocations();

}  // namespace nibble::test
