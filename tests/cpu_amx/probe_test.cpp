// The cpu_amx probe: always available, names the ISA level in use and what it found, and
// NIBBLE_MAX_ISA lowers the level (re-read at every probe call, so one process can test all).
#include <gtest/gtest.h>

#include "cpu_amx_test_util.hpp"

namespace nibble::test {
namespace {

TEST(CpuAmxProbe, AvailableAndSaysWhichIsa) {
  MaxIsa none("");
  nibble_probe_result r = cpu_amx_probe();
  EXPECT_EQ(r.available, 1);
  std::string d = r.detail;
  EXPECT_NE(d.find("isa="), std::string::npos) << d;
  EXPECT_NE(d.find("found:"), std::string::npos) << d;
  EXPECT_EQ(r.reasons & NIBBLE_PROBE_CAPPED_BY_USER, 0u) << d;
  const std::string isa = probed_isa();
  EXPECT_TRUE(isa == "scalar" || isa == "avx2" || isa == "avx512" || isa == "amx") << d;
  // A test build with emulated tiles reports the AMX level on any AVX-512 CPU, and says so.
  const bool emulated = d.find("tile instructions emulated in software") != std::string::npos;
  if (isa == "amx" && !emulated) {
    EXPECT_NE(d.find("amx-bf16"), std::string::npos) << d;
    EXPECT_NE(d.find("amx-int8"), std::string::npos) << d;
    EXPECT_NE(d.find("AMX permission granted"), std::string::npos) << d;
  } else if (emulated) {
    EXPECT_EQ(isa, "amx") << d;
  } else {
    // Below AMX the reason bits say why (informational while available).
    EXPECT_NE(r.reasons & (NIBBLE_PROBE_CPU_FEATURE_MISSING | NIBBLE_PROBE_OS_STATE_DISABLED), 0u)
        << d;
  }
  if (isa == "avx512" || isa == "amx") {
    EXPECT_NE(d.find("avx512-vnni"), std::string::npos) << d;
    EXPECT_NE(d.find("avx512-bf16"), std::string::npos) << d;
  }
}

TEST(CpuAmxProbe, MaxIsaLowersTheLevel) {
  const std::vector<std::string> levels = isa_levels_here();
  ASSERT_FALSE(levels.empty());
  for (size_t i = 0; i + 1 < levels.size(); ++i) {
    MaxIsa cap(levels[i]);
    nibble_probe_result r = cpu_amx_probe();
    EXPECT_EQ(r.available, 1);
    EXPECT_EQ(probed_isa(), levels[i]) << r.detail;
    EXPECT_NE(r.reasons & NIBBLE_PROBE_CAPPED_BY_USER, 0u) << r.detail;
    EXPECT_NE(std::string(r.detail).find("NIBBLE_MAX_ISA=" + levels[i]), std::string::npos)
        << r.detail;
  }
  // Back to the hardware's level once unset: nothing was cached.
  MaxIsa none("");
  EXPECT_EQ(probed_isa(), levels.back());
}

TEST(CpuAmxProbe, MaxIsaNeverRaisesAndUnknownValuesAreIgnored) {
  const std::string top = isa_levels_here().back();
  {
    MaxIsa cap("amx");
    EXPECT_EQ(probed_isa(), top);
    EXPECT_EQ(cpu_amx_probe().reasons & NIBBLE_PROBE_CAPPED_BY_USER, 0u);
  }
  {
    MaxIsa cap("sse9");
    nibble_probe_result r = cpu_amx_probe();
    EXPECT_EQ(probed_isa(), top);
    EXPECT_NE(std::string(r.detail).find("not understood"), std::string::npos) << r.detail;
  }
}

TEST(CpuAmxProbe, DeclaresItsKernels) {
  const nibble_kernel* a16 = cpu_amx().kernel("linear_a16");
  const nibble_kernel* a8 = cpu_amx().kernel("linear_a8");
  const nibble_kernel* dense = cpu_amx().kernel("dense_onednn");
  ASSERT_NE(a16, nullptr);
  ASSERT_NE(a8, nullptr);
  ASSERT_NE(dense, nullptr);
  EXPECT_EQ(a16->op, NIBBLE_OP_LINEAR);
  EXPECT_EQ(a16->numeric_mode, NIBBLE_MODE_W4A16);
  EXPECT_EQ(a8->numeric_mode, NIBBLE_MODE_W4A8);
  EXPECT_GT(a16->priority, a8->priority);
  EXPECT_EQ(dense->op, NIBBLE_OP_DENSE);
  for (const nibble_kernel* k : {a16, a8, dense}) {
    EXPECT_GT(k->error_bound_bf16, 0.0);
    EXPECT_LE(k->error_bound_bf16, 3e-2);
  }
}

TEST(CpuAmxProbe, ExplainsWhatItCannotImplement) {
  const nibble_kernel* a16 = cpu_amx().kernel("linear_a16");
  QuantSpec s;
  CanonicalWeight w = random_weight(s);
  nibble_layer_desc d = desc_for(w, NIBBLE_MODE_W4A16);
  EXPECT_EQ(why_not(a16, d), "");
  nibble_layer_desc bad = d;
  bad.bits = 3;
  EXPECT_NE(why_not(a16, bad).find("bits 3"), std::string::npos);
  bad = d;
  bad.group_size = 48;
  EXPECT_NE(why_not(a16, bad).find("group size 48"), std::string::npos);
  bad = d;
  bad.numeric_mode = NIBBLE_MODE_W4A8;
  EXPECT_NE(why_not(a16, bad).find("numeric mode"), std::string::npos);
  EXPECT_EQ(why_not(cpu_amx().kernel("linear_a8"), bad), "");
}

}  // namespace
}  // namespace nibble::test
