// Strict safetensors: what the reference reader refuses, nibble refuses too, with a message that
// names the file and the byte offset: duplicate keys, anything after the JSON object (a NUL
// included), holes, overlaps and trailing bytes in the data section.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

#include "hostile_input.hpp"

using ::testing::AllOf;
using ::testing::HasSubstr;
using namespace nibble;
using namespace nibble::test;

namespace {

std::string entry(const std::string& name, int64_t begin, int64_t end) {
  return "\"" + name + "\":{\"dtype\":\"U8\",\"shape\":[" + std::to_string(end - begin) +
         "],\"data_offsets\":[" + std::to_string(begin) + "," + std::to_string(end) + "]}";
}

TEST(StrictSafetensors, AValidFileIsAcceptedWithSpacePadding) {
  // Positive control: the same construction as the refusals below, but well formed.
  const std::string header = "{" + entry("a", 0, 3) + "," + entry("b", 3, 7) + "}    ";
  EXPECT_EQ(open_error(safetensors_image(header, "abcdefg")), "");
  auto f = SafetensorsFile::from_bytes(
      std::as_bytes(std::span<const char>(safetensors_image(header, "abcdefg"))), "x");
  ASSERT_EQ(f->tensors().size(), 2u);
  EXPECT_EQ(char(f->tensor("b").data[0]), 'd');
}

TEST(StrictSafetensors, DuplicateTensorNamesAreRefusedWithBothOffsets) {
  const std::string header = "{" + entry("w", 0, 2) + "," + entry("w", 2, 4) + "}";
  const std::string msg = open_error(safetensors_image(header, "abcd"));
  EXPECT_THAT(msg, AllOf(HasSubstr("mem.safetensors"), HasSubstr("tensor w appears twice"),
                         HasSubstr("(at bytes 12 and ")));
}

TEST(StrictSafetensors, DuplicateMetadataAndEntryKeysAreRefused) {
  EXPECT_THAT(
      open_error(safetensors_image(R"({"__metadata__":{"k":"1"},"__metadata__":{"k":"2"}})", "")),
      HasSubstr("__metadata__ appears twice"));
  EXPECT_THAT(open_error(safetensors_image(R"({"__metadata__":{"k":"1","k":"2"}})", "")),
              AllOf(HasSubstr("__metadata__ key k appears twice"), HasSubstr("at byte")));
  EXPECT_THAT(open_error(safetensors_image(
                  R"({"a":{"dtype":"U8","shape":[1],"shape":[2],"data_offsets":[0,1]}})", "x")),
              HasSubstr("key shape appears twice"));
}

TEST(StrictSafetensors, TextAfterTheObjectIsRefusedEvenAfterANul) {
  const std::string ok = "{" + entry("a", 0, 1) + "}";
  EXPECT_THAT(open_error(safetensors_image(ok + "  {}", "x")),
              AllOf(HasSubstr("not valid JSON at byte"), HasSubstr("end of input")));
  EXPECT_THAT(open_error(safetensors_image(ok + std::string("\0{\"b\":1}", 8), "x")),
              AllOf(HasSubstr("NUL byte in the header at byte " + std::to_string(8 + ok.size()))));
  // A NUL inside the object would have ended nlohmann's input early.
  EXPECT_THAT(open_error(safetensors_image(std::string("{\0}", 3), "")), HasSubstr("NUL byte"));
}

TEST(StrictSafetensors, HolesOverlapsAndTrailingBytesAreRefusedWithTheFileOffset) {
  const std::string two = "{" + entry("a", 0, 2) + "," + entry("b", 4, 6) + "}";
  EXPECT_THAT(open_error(safetensors_image(two, "abcdef")),
              AllOf(HasSubstr("2 unused bytes"),
                    HasSubstr("file offset " + std::to_string(8 + two.size() + 2)),
                    HasSubstr("before tensor b")));
  const std::string one = "{" + entry("a", 0, 2) + "}";
  EXPECT_THAT(open_error(safetensors_image(one, "abcd")),
              AllOf(HasSubstr("2 trailing bytes"),
                    HasSubstr("file offset " + std::to_string(8 + one.size() + 2))));
  EXPECT_THAT(open_error(safetensors_image("{}", "z")), HasSubstr("1 trailing bytes"));
  const std::string overlap = "{" + entry("a", 0, 4) + "," + entry("b", 2, 6) + "}";
  EXPECT_THAT(open_error(safetensors_image(overlap, "abcdef")),
              AllOf(HasSubstr("tensor b"), HasSubstr("overlap tensor a")));
}

TEST(StrictSafetensors, RandomLayoutsAreAcceptedExactlyWhenTheyTileTheDataSection) {
  // Property: for random tensor sizes and a random gap (or none) inserted before one tensor, or
  // random trailing bytes, the file opens if and only if the tensors tile the data section.
  std::mt19937 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 1 + int(rng() % 6);
    const int gap_at = int(rng() % (n + 2)) - 1;  // -1: none; n: trailing bytes
    const int gap = 1 + int(rng() % 5);
    std::string header = "{", data;
    int64_t offset = 0;
    for (int i = 0; i < n; ++i) {
      if (i == gap_at) offset += gap, data.append(size_t(gap), 'g');
      const int64_t size = int64_t(rng() % 9);
      header += (i ? "," : "") + entry("t" + std::to_string(i), offset, offset + size);
      data.append(size_t(size), 'd');
      offset += size;
    }
    if (gap_at == n) data.append(size_t(gap), 't');
    header += "}";
    const bool tiles = gap_at < 0;
    const std::string msg = open_error(safetensors_image(header, data));
    EXPECT_EQ(msg.empty(), tiles) << header << " / " << data.size() << ": " << msg;
    if (!tiles) EXPECT_THAT(msg, HasSubstr("file offset"));
  }
}

}  // namespace
