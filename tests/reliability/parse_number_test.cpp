// Checked number parsing: whole text, accepted range, and the range in the message.
#include <gtest/gtest.h>

#include <nibble/error.hpp>
#include <nibble/parse_number.hpp>

#include <string>

namespace {

std::string message_of(const std::string& text, int64_t lo, int64_t hi) {
  try {
    nibble::parse_integer(text, lo, hi, "--threads");
  } catch (const nibble::Error& e) {
    return e.what();
  }
  return "";
}

TEST(ParseNumber, AcceptsWholeNumbersInRange) {
  EXPECT_EQ(nibble::parse_integer("16", 0, 4096, "--threads"), 16);
  EXPECT_EQ(nibble::parse_integer("+4", 0, 4096, "--threads"), 4);
  EXPECT_EQ(nibble::parse_integer("-1", -1, 1, "x"), -1);
  EXPECT_EQ(nibble::parse_integer("9223372036854775807", 0, INT64_MAX, "x"), INT64_MAX);
}

TEST(ParseNumber, RefusesWhatIsNotExactlyANumberInRange) {
  for (const char* bad : {"", "4x", " 4", "4 ", "0x10", "1e3", "4294967300", "99999999999999999999",
                          "-", "+", "++1", "100000"})
    EXPECT_EQ(message_of(bad, 0, 4096),
              std::string("--threads: '") + bad + "' is not a whole number in [0, 4096]")
        << bad;
}

TEST(ParseNumber, EscapesTheTextItQuotes) {
  EXPECT_EQ(message_of("4\x1b[2J", 0, 8), "--threads: '4\\x1B[2J' is not a whole number in [0, 8]");
}

TEST(ParseNumber, RealsAreFiniteAndInRange) {
  EXPECT_DOUBLE_EQ(nibble::parse_real("2.5", 0, 10, "--min-seconds"), 2.5);
  for (const char* bad : {"nan", "inf", "-1", "11", "2.5s", ""})
    EXPECT_THROW(nibble::parse_real(bad, 0, 10, "--min-seconds"), nibble::Error) << bad;
}

}  // namespace
