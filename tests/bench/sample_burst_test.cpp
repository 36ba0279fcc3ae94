// The calls per timed sample: --burst while that many of a case's calls fit the sample time, then
// as many as fit, never fewer than one; a call not measured leaves --burst as asked; a second call
// is made only where the first would cut the burst, and the faster of the two decides.
#include "bench_common.hpp"

#include <gtest/gtest.h>

#include <limits>
#include <vector>

namespace {

using nibble::bench::burst_for;
using nibble::bench::kSampleSeconds;
using nibble::bench::sample_calls;

TEST(SampleBurst, KeepsTheBurstWhileItsCallsFitTheSampleTime) {
  EXPECT_EQ(burst_for(8, 1e-6), 8);
  EXPECT_EQ(burst_for(8, kSampleSeconds / 8), 8);
  EXPECT_EQ(burst_for(1, 1e-6), 1);
  EXPECT_EQ(burst_for(64, kSampleSeconds / 100), 64);
  EXPECT_EQ(burst_for(8, 1e-310), 8);  // subnormal: the quotient is infinite
  EXPECT_EQ(burst_for(0, 1e-6), 1);    // a burst is at least one call
}

TEST(SampleBurst, RunsAsManyCallsAsFitWhenFewer) {
  EXPECT_EQ(burst_for(8, kSampleSeconds / 5.5), 5);
  EXPECT_EQ(burst_for(8, kSampleSeconds / 7.5), 7);  // just short of the whole burst
  EXPECT_EQ(burst_for(8, kSampleSeconds / 2.5), 2);
  EXPECT_EQ(burst_for(8, kSampleSeconds * 0.9), 1);
  EXPECT_EQ(burst_for(8, kSampleSeconds * 20), 1);  // a long call: one per sample, never zero
  EXPECT_EQ(burst_for(64, kSampleSeconds / 9.5), 9);
}

TEST(SampleBurst, LeavesTheBurstAsAskedWithoutATime) {
  EXPECT_EQ(burst_for(8, 0.0), 8);
  EXPECT_EQ(burst_for(8, -1.0), 8);
  EXPECT_EQ(burst_for(8, std::numeric_limits<double>::quiet_NaN()), 8);
  EXPECT_EQ(burst_for(8, std::numeric_limits<double>::infinity()), 1);
}

TEST(SampleBurst, MakesASecondCallOnlyWhereTheFirstWouldCutTheBurst) {
  std::vector<double> second_calls;
  auto another = [&](double seconds) {
    return [&second_calls, seconds] {
      second_calls.push_back(seconds);
      return seconds;
    };
  };
  // The whole burst fits: no second call.
  EXPECT_EQ(sample_calls(8, kSampleSeconds / 10, another(1.0)), 8);
  EXPECT_TRUE(second_calls.empty());
  // A slow warm-up, a fast second call: the faster decides.
  EXPECT_EQ(sample_calls(8, kSampleSeconds, another(kSampleSeconds / 10)), 8);
  EXPECT_EQ(sample_calls(8, kSampleSeconds, another(kSampleSeconds / 4.5)), 4);
  // A second call slower than the first does not cut further.
  EXPECT_EQ(sample_calls(8, kSampleSeconds / 3.5, another(kSampleSeconds)), 3);
  EXPECT_EQ(second_calls.size(), 3u);
}

}  // namespace
