// The safetensors reader and writer: round trips of every dtype, the upstream bad files, and
// hand-made malformed headers, each with its own message.
#include <nibble/safetensors.hpp>

#include "checkpoint_test_util.hpp"

namespace nibble {
namespace {

using test::error_of;
using test::expect_mentions;

// A safetensors image from a header string and a data section of `data_bytes` bytes.
std::vector<std::byte> image(const std::string& header, size_t data_bytes,
                             uint64_t claimed_len = 0) {
  uint64_t len = claimed_len ? claimed_len : header.size();
  std::vector<std::byte> out(8 + header.size() + data_bytes, std::byte{0x5a});
  std::memcpy(out.data(), &len, 8);
  std::memcpy(out.data() + 8, header.data(), header.size());
  return out;
}

std::string parse_error(const std::string& header, size_t data_bytes, uint64_t claimed_len = 0) {
  auto bytes = image(header, data_bytes, claimed_len);
  return error_of([&] { SafetensorsFile::from_bytes(bytes, "mem.safetensors"); });
}

TEST(Safetensors, WriteThenReadEveryDtype) {
  test::TempDir dir;
  std::mt19937_64 rng(11);
  std::map<std::string, OwnedTensor> tensors;
  const DType all[] = {DType::F16, DType::BF16, DType::F32, DType::F64, DType::I8,
                       DType::U8,  DType::I16,  DType::I32, DType::I64, DType::BOOL};
  for (DType d : all) {
    OwnedTensor t = OwnedTensor::zeros(d, {3, 5});
    for (auto& b : t.data) b = std::byte(rng() & (d == DType::BOOL ? 1 : 0xff));
    tensors[std::string("t_") + std::string(safetensors_dtype_name(d))] = std::move(t);
  }
  tensors["scalar"] = OwnedTensor::zeros(DType::F32, {});
  tensors["empty"] = OwnedTensor::zeros(DType::I32, {0, 4});
  write_safetensors(dir / "a.safetensors", tensors, {{"format", "pt"}, {"note", "x"}});
  auto file = SafetensorsFile::open(dir / "a.safetensors");
  EXPECT_EQ(file->metadata().at("note"), "x");
  ASSERT_EQ(file->tensors().size(), tensors.size());
  for (const auto& [name, t] : tensors) {
    const TensorView& v = file->tensor(name);
    EXPECT_EQ(v.dtype, t.dtype) << name;
    EXPECT_EQ(v.shape, t.shape) << name;
    ASSERT_EQ(v.nbytes, t.data.size()) << name;
    if (v.nbytes) {
      EXPECT_EQ(std::memcmp(v.data, t.data.data(), v.nbytes), 0) << name;
    }
  }
  EXPECT_EQ(file->tensor("scalar").numel(), 1);
  EXPECT_EQ(file->find("nope"), nullptr);
  expect_mentions(error_of([&] { file->tensor("nope"); }), {"a.safetensors", "nope"});
}

TEST(Safetensors, UpstreamBadFiles) {
  auto bad = test::data_dir() / "bad";
  auto msg = error_of([&] { SafetensorsFile::open(bad / "truncated.safetensors"); });
  expect_mentions(msg, {"truncated.safetensors", "truncated",
                        "model.layers.0.self_attn.q_proj.qweight", "52992", "105984"});
  msg = error_of([&] { SafetensorsFile::open(bad / "header_overflow.safetensors"); });
  expect_mentions(msg, {"header_overflow.safetensors", "header length 110912",
                        "larger than the file", "106816"});
  msg = error_of([&] { SafetensorsFile::open(bad / "bad_offsets.safetensors"); });
  expect_mentions(msg, {"bad_offsets.safetensors", "model.layers.0.self_attn.q_proj.qweight",
                        "data_offsets", "[106048, 204352]", "past the end", "105984"});
}

TEST(Safetensors, MalformedHeadersEachGetTheirOwnMessage) {
  const std::string ok = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  EXPECT_NO_THROW(SafetensorsFile::from_bytes(image(ok, 8), "mem"));
  auto tiny = std::vector<std::byte>(5);
  expect_mentions(error_of([&] { SafetensorsFile::from_bytes(tiny, "mem.safetensors"); }),
                  {"too short"});
  expect_mentions(parse_error(ok, 8, 1ull << 62), {"header length", "larger than the file"});
  expect_mentions(parse_error(ok, 4), {"truncated", "tensor a"});
  expect_mentions(parse_error("{\"a\":", 0), {"not valid JSON"});
  expect_mentions(parse_error("[1,2,3]", 0), {"must be an object"});
  expect_mentions(parse_error(std::string(100, '[') + std::string(100, ']'), 0), {"nests deeper"});
  expect_mentions(parse_error(R"({"a":{"dtype":"F8","shape":[2],"data_offsets":[0,2]}})", 2),
                  {"tensor a", "unknown dtype \"F8\""});
  expect_mentions(parse_error(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8),
                  {"tensor a", "span 8 bytes", "needs 12"});
  expect_mentions(parse_error(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8),
                  {"tensor a", "not a non-negative integer"});
  expect_mentions(
      parse_error(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})",
                  8),
      {"tensor a", "overflows"});
  expect_mentions(parse_error(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8),
                  {"tensor a", "begin <= end"});
  expect_mentions(parse_error(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", 8),
                  {"tensor a", "data_offsets"});
  expect_mentions(parse_error(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                              R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                              12),
                  {"tensor b", "overlap tensor a"});
  expect_mentions(parse_error(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[16,24]}})", 8),
                  {"tensor a", "data_offsets [16, 24]", "past the end of the 8-byte data section"});
  expect_mentions(parse_error(R"({"__metadata__":{"k":1}})", 0),
                  {"__metadata__", "must be a string"});
  expect_mentions(parse_error(R"({"a":{"shape":[2],"data_offsets":[0,8]}})", 8),
                  {"tensor a", "dtype"});
  expect_mentions(
      parse_error(R"({"a":{"dtype":"F32","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,4]}})", 4),
      {"tensor a", "rank 9"});
}

TEST(Safetensors, WriterRefusesInconsistentTensors) {
  test::TempDir dir;
  std::vector<std::byte> bytes(6);
  std::vector<TensorToWrite> list{{"a", DType::F32, {2}, bytes}};
  expect_mentions(error_of([&] { write_safetensors(dir / "x.safetensors", list); }),
                  {"tensor a", "6 bytes", "needs 8"});
  std::vector<std::byte> eight(8);
  std::vector<TensorToWrite> twice{{"a", DType::F32, {2}, eight}, {"a", DType::F32, {2}, eight}};
  expect_mentions(error_of([&] { write_safetensors(dir / "x.safetensors", twice); }),
                  {"tensor name a", "repeated"});
}

TEST(Safetensors, ShardedStore) {
  test::TempDir dir;
  std::map<std::string, OwnedTensor> a, b;
  a["x"] = OwnedTensor::zeros(DType::F32, {4});
  a["x"].data[0] = std::byte{1};
  b["y"] = OwnedTensor::zeros(DType::I32, {2});
  write_safetensors(dir / "s1.safetensors", a);
  write_safetensors(dir / "s2.safetensors", b);
  test::write_text(dir / "model.safetensors.index.json",
                   R"({"metadata":{},"weight_map":{"x":"s1.safetensors","y":"s2.safetensors"}})");
  TensorStore store = TensorStore::open(dir / "model.safetensors.index.json");
  EXPECT_EQ(store.names(), (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(store.tensor("x").data[0], std::byte{1});
  EXPECT_EQ(store.files().size(), 2u);

  test::write_text(dir / "lie.index.json",
                   R"({"weight_map":{"x":"s2.safetensors","y":"s2.safetensors"}})");
  expect_mentions(error_of([&] { TensorStore::open(dir / "lie.index.json"); }),
                  {"tensor x", "s2.safetensors", "does not contain it"});
  test::write_text(dir / "escape.index.json", R"({"weight_map":{"x":"../s1.safetensors"}})");
  expect_mentions(error_of([&] { TensorStore::open(dir / "escape.index.json"); }),
                  {"not a plain file name"});
  write_safetensors(dir / "dup.safetensors", a);
  test::write_text(dir / "dup.index.json",
                   R"({"weight_map":{"x":"s1.safetensors","z":"dup.safetensors"}})");
  expect_mentions(error_of([&] { TensorStore::open(dir / "dup.index.json"); }),
                  {"tensor x appears in both"});
  test::write_text(dir / "nomap.index.json", R"({"metadata":{}})");
  expect_mentions(error_of([&] { TensorStore::open(dir / "nomap.index.json"); }), {"weight_map"});
  test::write_text(dir / "missing.index.json", R"({"weight_map":{"x":"gone.safetensors"}})");
  expect_mentions(error_of([&] { TensorStore::open(dir / "missing.index.json"); }),
                  {"gone.safetensors"});
}

}  // namespace
}  // namespace nibble
