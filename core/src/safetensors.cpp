// The safetensors reader: header validation and the memory-mapped file.
#include <nibble/error.hpp>
#include <nibble/safetensors.hpp>
#include <nibble/sdk/numeric.hpp>
#include <nibble/untrusted_text.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>

#include "io/regular_file.hpp"
#include "safetensors_header.hpp"
#include "text/name_text.hpp"

static_assert(std::endian::native == std::endian::little,
              "safetensors stores little-endian data; nibble reads it in place");

namespace nibble {

namespace {

struct DTypeInfo {
  DType dtype;
  std::string_view name;
  size_t size;
  DLDataType dl;
};

constexpr DTypeInfo kDTypes[] = {
    {DType::F16, "F16", 2, {kDLFloat, 16, 1}}, {DType::BF16, "BF16", 2, {kDLBfloat, 16, 1}},
    {DType::F32, "F32", 4, {kDLFloat, 32, 1}}, {DType::F64, "F64", 8, {kDLFloat, 64, 1}},
    {DType::I8, "I8", 1, {kDLInt, 8, 1}},      {DType::U8, "U8", 1, {kDLUInt, 8, 1}},
    {DType::I16, "I16", 2, {kDLInt, 16, 1}},   {DType::I32, "I32", 4, {kDLInt, 32, 1}},
    {DType::I64, "I64", 8, {kDLInt, 64, 1}},   {DType::BOOL, "BOOL", 1, {kDLUInt, 8, 1}},
};

const DTypeInfo& info(DType dtype) {
  for (const auto& i : kDTypes) {
    if (i.dtype == dtype) return i;
  }
  throw Error("internal: unknown DType " + std::to_string(int(dtype)));
}

uint64_t read_le64(const std::byte* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

}  // namespace

std::string_view safetensors_dtype_name(DType dtype) { return info(dtype).name; }
size_t dtype_size(DType dtype) { return info(dtype).size; }
DLDataType to_dlpack(DType dtype) { return info(dtype).dl; }

std::optional<DType> parse_dtype(std::string_view name) {
  for (const auto& i : kDTypes) {
    if (i.name == name) return i.dtype;
  }
  return std::nullopt;
}

DType from_dlpack(DLDataType dtype) {
  if (sdk::same_dtype(dtype, sdk::dtype_f16())) return DType::F16;
  if (sdk::same_dtype(dtype, sdk::dtype_bf16())) return DType::BF16;
  if (sdk::same_dtype(dtype, sdk::dtype_f32())) return DType::F32;
  throw Error("dtype " + sdk::dtype_name(dtype) + " has no safetensors float equivalent here " +
              "(expected f16, bf16 or f32)");
}

int64_t TensorView::numel() const {
  // Shapes from files are checked to fit in int64 when their zeros are left out; a zero anywhere
  // makes the product 0 without multiplying the others first.
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return 0;
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string TensorView::shape_string() const { return fmt::format("[{}]", fmt::join(shape, ", ")); }

int32_t TensorView::i32(size_t i) const {
  int32_t v;
  std::memcpy(&v, data + i * sizeof v, sizeof v);
  return v;
}

double TensorView::as_double(size_t i) const {
  switch (dtype) {
    case DType::F16:
    case DType::BF16: {
      uint16_t h;
      std::memcpy(&h, data + i * 2, 2);
      return dtype == DType::F16 ? sdk::f16_to_f32(h) : sdk::bf16_to_f32(h);
    }
    case DType::F32: {
      float f;
      std::memcpy(&f, data + i * 4, 4);
      return f;
    }
    case DType::F64: {
      double d;
      std::memcpy(&d, data + i * 8, 8);
      return d;
    }
    default:
      throw Error(fmt::format("tensor {} in {}: dtype {} is not a float type",
                              detail::name_text(name), file, safetensors_dtype_name(dtype)));
  }
}

std::shared_ptr<const SafetensorsFile> SafetensorsFile::open(const std::filesystem::path& path) {
  std::shared_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path.string();
  detail::RegularFile in(path, "safetensors file");
  const std::string f = escape_untrusted(file->path_, 400);
  size_t size = size_t(in.size());
  if (size < 8) {
    throw Error(fmt::format(
        "safetensors file {} is {} bytes, too short for the 8-byte header length", f, size));
  }
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, in.fd(), 0);
  if (map == MAP_FAILED) {
    throw Error(fmt::format("cannot map safetensors file {}: {}", f, std::strerror(errno)));
  }
  file->map_ = map;
  file->map_size_ = size;
  file->parse(static_cast<const std::byte*>(map), size);
  return file;
}

std::shared_ptr<const SafetensorsFile> SafetensorsFile::from_bytes(std::span<const std::byte> bytes,
                                                                   const std::string& label) {
  std::shared_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = label;
  file->owned_.assign(bytes.begin(), bytes.end());
  file->parse(file->owned_.data(), file->owned_.size());
  return file;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) ::munmap(map_, map_size_);
}

void SafetensorsFile::parse(const std::byte* image, size_t size) {
  const std::string f = escape_untrusted(path_, 400);
  if (size < 8) {
    throw Error(fmt::format(
        "safetensors file {} is {} bytes, too short for the 8-byte header length", f, size));
  }
  // Everything the header claims is checked against the file before anything is allocated.
  uint64_t header_len = read_le64(image);
  if (header_len > size - 8) {
    throw Error(
        fmt::format("safetensors file {}: header length {} is larger than the file ({} bytes)", f,
                    header_len, size));
  }
  if (header_len > kMaxHeaderBytes) {
    throw Error(fmt::format("safetensors file {}: header length {} exceeds the {}-byte limit", f,
                            header_len, kMaxHeaderBytes));
  }
  if (header_len < 2) {
    throw Error(fmt::format("safetensors file {}: header length {} cannot hold a JSON object", f,
                            header_len));
  }
  std::string_view text(reinterpret_cast<const char*>(image + 8), size_t(header_len));
  detail::ParsedHeader header = detail::parse_safetensors_header(text, f);
  metadata_ = std::move(header.metadata);
  std::vector<detail::HeaderEntry>& entries = header.tensors;
  const std::byte* data = image + 8 + header_len;
  const uint64_t data_start = 8 + header_len;
  const uint64_t data_size = size - data_start;

  // The tensors must tile the data section exactly, as the reference reader requires: sorted by
  // offset, each starting where the previous one ends, the last ending at the end of the file. A
  // file whose tensors tile contiguously but end past the file was cut short.
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  bool contiguous = true;
  uint64_t cursor = 0;
  for (const auto& e : entries) {
    contiguous = contiguous && e.begin == cursor;
    cursor = std::max(cursor, e.end);
  }
  const uint64_t promised = cursor;
  for (const auto& e : entries) {
    if (e.end <= data_size) continue;
    const std::string name = detail::name_text(e.name);
    if (contiguous) {
      throw Error(
          fmt::format("safetensors file {} is truncated: tensor {} (and every tensor after it) "
                      "needs bytes past the end of the file (data_offsets [{}, {}]; data section "
                      "is {} bytes, header promises {})",
                      f, name, e.begin, e.end, data_size, promised));
    }
    throw Error(
        fmt::format("safetensors file {}: tensor {}: data_offsets [{}, {}] point past the end of "
                    "the {}-byte data section",
                    f, name, e.begin, e.end, data_size));
  }
  uint64_t covered = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    const auto& e = entries[i];
    const std::string name = detail::name_text(e.name);
    if (e.begin < covered) {
      const auto& prev = entries[i - 1];
      throw Error(
          fmt::format("safetensors file {}: tensor {}: data_offsets [{}, {}] overlap tensor {} at "
                      "[{}, {}] (file offset {})",
                      f, name, e.begin, e.end, detail::name_text(prev.name), prev.begin, prev.end,
                      data_start + e.begin));
    }
    if (e.begin > covered) {
      throw Error(
          fmt::format("safetensors file {}: {} unused bytes in the data section at file offset "
                      "{} (data offset {}), before tensor {}; tensors must be stored back to "
                      "back",
                      f, e.begin - covered, data_start + covered, covered, name));
    }
    covered = e.end;
  }
  if (covered != data_size) {
    throw Error(
        fmt::format("safetensors file {}: {} trailing bytes after the last tensor, at file "
                    "offset {} (the data section is {} bytes, the tensors cover {})",
                    f, data_size - covered, data_start + covered, data_size, covered));
  }
  tensors_.reserve(entries.size());
  for (auto& e : entries) {
    TensorView v;
    v.name = std::move(e.name);
    v.file = f;
    v.dtype = e.dtype;
    v.shape = std::move(e.shape);
    v.nbytes = size_t(e.nbytes);
    v.data = data + e.begin;
    tensors_.push_back(std::move(v));
  }
  for (size_t i = 0; i < tensors_.size(); ++i) index_.emplace(tensors_[i].name, i);
}

const TensorView* SafetensorsFile::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

const TensorView& SafetensorsFile::tensor(std::string_view name) const {
  if (const TensorView* t = find(name)) return *t;
  throw Error(fmt::format("safetensors file {} has no tensor {}", escape_untrusted(path_, 400),
                          detail::name_text(name)));
}

}  // namespace nibble
