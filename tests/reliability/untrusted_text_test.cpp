// escape_untrusted: what may reach a terminal from an untrusted string.
#include <gtest/gtest.h>

#include <nibble/untrusted_text.hpp>

#include <random>
#include <string>

namespace {

using nibble::escape_untrusted;

TEST(UntrustedText, PrintableAsciiAndUtf8PassUnchanged) {
  EXPECT_EQ(escape_untrusted("model.layers.0.mlp.experts.7.w1"), "model.layers.0.mlp.experts.7.w1");
  EXPECT_EQ(escape_untrusted("gr\xC3\xBC\xC3\x9F \xE6\xBC\xA2\xE5\xAD\x97 \xF0\x9F\x99\x82"),
            "gr\xC3\xBC\xC3\x9F \xE6\xBC\xA2\xE5\xAD\x97 \xF0\x9F\x99\x82");
}

TEST(UntrustedText, ControlBytesBecomeHexEscapes) {
  EXPECT_EQ(escape_untrusted(std::string("a\x1b]0;owned\x07z", 12)), "a\\x1B]0;owned\\x07z");
  EXPECT_EQ(escape_untrusted(std::string("x\0y", 3)), "x\\x00y");
  EXPECT_EQ(escape_untrusted("tab\tnl\ndel\x7F"), "tab\\x09nl\\x0Adel\\x7F");
  EXPECT_EQ(escape_untrusted("back\\slash"), "back\\\\slash");
}

TEST(UntrustedText, InvalidUtf8BecomesHexEscapes) {
  EXPECT_EQ(escape_untrusted("\xFF\xFE"), "\\xFF\\xFE");
  EXPECT_EQ(escape_untrusted("\xC0\xAF"), "\\xC0\\xAF");           // overlong '/'
  EXPECT_EQ(escape_untrusted("\xED\xA0\x80"), "\\xED\\xA0\\x80");  // a surrogate
  EXPECT_EQ(escape_untrusted("\xE6\xBC"), "\\xE6\\xBC");           // truncated
  EXPECT_EQ(escape_untrusted("\x9B"
                             "31m"),
            "\\x9B31m");  // raw C1 byte (8-bit CSI)
}

TEST(UntrustedText, C1AndBidiCodePointsBecomeUnicodeEscapes) {
  EXPECT_EQ(escape_untrusted("\xC2\x9B"
                             "2J"),
            "\\u{009B}2J");  // CSI as UTF-8
  EXPECT_EQ(escape_untrusted("a\xE2\x80\xAE"
                             "b"),
            "a\\u{202E}b");
  EXPECT_EQ(escape_untrusted("\xEF\xBB\xBFname"), "\\u{FEFF}name");
}

TEST(UntrustedText, CutsLongNamesAndSaysHowLong) {
  const std::string big(30000, 'a');
  const std::string cut = escape_untrusted(big, 100);
  EXPECT_EQ(cut, std::string(100, 'a') + "... (30000 bytes)");
  EXPECT_EQ(nibble::quoted_untrusted("q_proj"), "'q_proj'");
}

// Whatever the bytes, the result is printable ASCII or valid UTF-8 with no control code point.
TEST(UntrustedText, RandomBytesAlwaysGivePrintableValidUtf8) {
  std::mt19937 rng(7);
  for (int round = 0; round < 2000; ++round) {
    std::string s(size_t(rng() % 64), '\0');
    for (char& c : s) c = char(rng() & 0xFF);
    const std::string e = escape_untrusted(s);
    ASSERT_TRUE(nibble::is_valid_utf8(e));
    for (size_t i = 0; i < e.size(); ++i) {
      const unsigned char c = static_cast<unsigned char>(e[i]);
      ASSERT_FALSE(c < 0x20 || c == 0x7F) << "control byte in " << e;
      if (c == 0xC2 && i + 1 < e.size()) {
        const unsigned char d = static_cast<unsigned char>(e[i + 1]);
        ASSERT_FALSE(d >= 0x80 && d <= 0x9F) << "C1 code point in " << e;
      }
    }
    EXPECT_EQ(escape_untrusted(e), [&] {
      std::string doubled;
      for (char c : e) doubled += c == '\\' ? std::string("\\\\") : std::string(1, c);
      return doubled;
    }()) << "an escaped string must be stable except for its backslashes";
  }
}

TEST(UntrustedText, Utf8Validation) {
  EXPECT_TRUE(nibble::is_valid_utf8("plain"));
  EXPECT_TRUE(nibble::is_valid_utf8("\xF4\x8F\xBF\xBF"));   // U+10FFFF
  EXPECT_FALSE(nibble::is_valid_utf8("\xF4\x90\x80\x80"));  // past U+10FFFF
  EXPECT_FALSE(nibble::is_valid_utf8("\x80"));
}

}  // namespace
