// The calls per timed sample: --burst while that many of a case's calls fit the sample time, then
// as many as fit, never fewer than one; a call not measured leaves --burst as asked.
#include "bench_common.hpp"

#include <gtest/gtest.h>

#include <limits>

namespace {

using nibble::bench::burst_for;
using nibble::bench::kSampleSeconds;

TEST(SampleBurst, KeepsTheBurstWhileItsCallsFitTheSampleTime) {
  EXPECT_EQ(burst_for(8, 1e-6), 8);
  EXPECT_EQ(burst_for(8, kSampleSeconds / 8), 8);
  EXPECT_EQ(burst_for(1, 1e-6), 1);
  EXPECT_EQ(burst_for(64, kSampleSeconds / 100), 64);
}

TEST(SampleBurst, RunsAsManyCallsAsFitWhenFewer) {
  EXPECT_EQ(burst_for(8, kSampleSeconds / 5), 5);
  EXPECT_EQ(burst_for(8, kSampleSeconds / 2.5), 2);
  EXPECT_EQ(burst_for(8, kSampleSeconds * 0.9), 1);
  EXPECT_EQ(burst_for(8, kSampleSeconds * 20), 1);  // a long call: one per sample, never zero
  EXPECT_EQ(burst_for(64, kSampleSeconds / 9.5), 9);
}

TEST(SampleBurst, LeavesTheBurstAsAskedWithoutATime) {
  EXPECT_EQ(burst_for(8, 0.0), 8);
  EXPECT_EQ(burst_for(8, -1.0), 8);
  EXPECT_EQ(burst_for(8, std::numeric_limits<double>::quiet_NaN()), 8);
}

}  // namespace
