// The safetensors reader: header validation and the memory-mapped file.
#include <nibble/error.hpp>
#include <nibble/safetensors.hpp>
#include <nibble/sdk/numeric.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>

#include "safetensors_json.hpp"

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

// A non-negative integer from a JSON value, or nullopt when it is anything else.
std::optional<uint64_t> json_uint(const nlohmann::json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0) return uint64_t(v.get<int64_t>());
  return std::nullopt;
}

}  // namespace

std::string_view dtype_name(DType dtype) { return info(dtype).name; }
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
      throw Error(fmt::format("tensor {} in {}: dtype {} is not a float type", name, file,
                              dtype_name(dtype)));
  }
}

std::shared_ptr<const SafetensorsFile> SafetensorsFile::open(const std::filesystem::path& path) {
  std::shared_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path.string();
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    throw Error(
        fmt::format("cannot open safetensors file {}: {}", file->path_, std::strerror(errno)));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(fmt::format("safetensors file {} is not a regular file", file->path_));
  }
  size_t size = size_t(st.st_size);
  if (size < 8) {
    ::close(fd);
    throw Error(
        fmt::format("safetensors file {} is {} bytes, too short for the 8-byte header "
                    "length",
                    file->path_, size));
  }
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) {
    throw Error(
        fmt::format("cannot map safetensors file {}: {}", file->path_, std::strerror(errno)));
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
  const std::string& f = path_;
  if (size < 8) {
    throw Error(
        fmt::format("safetensors file {} is {} bytes, too short for the 8-byte header "
                    "length",
                    f, size));
  }
  // Everything the header claims is checked against the file before anything is allocated.
  uint64_t header_len = read_le64(image);
  if (header_len > size - 8) {
    throw Error(
        fmt::format("safetensors file {}: header length {} is larger than the file ({} "
                    "bytes)",
                    f, header_len, size));
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
  nlohmann::json header = detail::parse_json(text, "safetensors file " + f + " header");
  if (!header.is_object()) {
    throw Error(fmt::format("safetensors file {}: header is JSON {} but must be an object", f,
                            header.type_name()));
  }
  if (header.size() > kMaxTensorsPerFile + 1) {
    throw Error(fmt::format("safetensors file {}: header lists {} entries, more than the limit {}",
                            f, header.size(), kMaxTensorsPerFile));
  }
  const std::byte* data = image + 8 + header_len;
  const uint64_t data_size = size - 8 - header_len;

  struct Entry {
    uint64_t begin, end;
    size_t index;
  };
  std::vector<Entry> entries;
  tensors_.reserve(header.size());
  for (const auto& item : header.items()) {
    // Named copies rather than structured bindings: lambdas below capture them.
    const std::string& name = item.key();
    const nlohmann::json& value = item.value();
    if (name == "__metadata__") {
      if (!value.is_object()) {
        throw Error(
            fmt::format("safetensors file {}: __metadata__ must be an object of strings, "
                        "found {}",
                        f, value.type_name()));
      }
      for (const auto& [key, v] : value.items()) {
        if (!v.is_string()) {
          throw Error(
              fmt::format("safetensors file {}: __metadata__[\"{}\"] must be a string, "
                          "found {}",
                          f, key, v.type_name()));
        }
        metadata_[key] = v.get<std::string>();
      }
      continue;
    }
    auto fail = [&](const std::string& what) {
      return Error(fmt::format("safetensors file {}: tensor {}: {}", f, name, what));
    };
    if (!value.is_object())
      throw fail(fmt::format("entry is {}, expected an object", value.type_name()));
    auto dt = value.find("dtype");
    auto sh = value.find("shape");
    auto off = value.find("data_offsets");
    if (dt == value.end() || !dt->is_string()) throw fail("missing or non-string \"dtype\"");
    if (sh == value.end() || !sh->is_array()) throw fail("missing or non-array \"shape\"");
    if (off == value.end() || !off->is_array() || off->size() != 2) {
      throw fail("missing \"data_offsets\" or not a [begin, end] pair");
    }
    auto dtype = parse_dtype(dt->get<std::string>());
    if (!dtype) {
      throw fail(
          fmt::format("unknown dtype \"{}\" (supported: F16, BF16, F32, F64, I8, U8, I16, "
                      "I32, I64, BOOL)",
                      dt->get<std::string>()));
    }
    if (sh->size() > kMaxRank) throw fail(fmt::format("rank {} exceeds {}", sh->size(), kMaxRank));
    TensorView view;
    view.name = name;
    view.file = f;
    view.dtype = *dtype;
    uint64_t numel = 1;
    for (const auto& d : *sh) {
      auto dim = json_uint(d);
      if (!dim || *dim > uint64_t(INT64_MAX))
        throw fail("shape " + sh->dump() + " has a dimension that is not a non-negative integer");
      if (__builtin_mul_overflow(numel, *dim, &numel))
        throw fail("shape " + sh->dump() + " overflows");
      view.shape.push_back(int64_t(*dim));
    }
    uint64_t nbytes = 0;
    if (__builtin_mul_overflow(numel, uint64_t(dtype_size(*dtype)), &nbytes)) {
      throw fail("shape " + sh->dump() + " overflows in bytes");
    }
    auto begin = json_uint((*off)[0]);
    auto end = json_uint((*off)[1]);
    if (!begin || !end || *begin > *end) {
      throw fail("data_offsets " + off->dump() + " are not two non-negative integers begin <= end");
    }
    if (*end - *begin != nbytes) {
      throw fail(fmt::format("data_offsets [{}, {}] span {} bytes but dtype {} x shape {} needs {}",
                             *begin, *end, *end - *begin, dtype_name(*dtype), sh->dump(), nbytes));
    }
    view.nbytes = size_t(nbytes);
    entries.push_back({*begin, *end, tensors_.size()});
    tensors_.push_back(std::move(view));
  }

  // Offsets: sorted order, no overlap, inside the data section. A file whose tensors tile the data
  // section contiguously but end past the file was cut short; anything else is a lying offset.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  bool contiguous = true;
  uint64_t cursor = 0;
  for (const auto& e : entries) {
    contiguous = contiguous && e.begin == cursor;
    cursor = std::max(cursor, e.end);
  }
  const uint64_t promised = cursor;
  for (size_t i = 0; i < entries.size(); ++i) {
    const auto& e = entries[i];
    const auto& name = tensors_[e.index].name;
    if (e.end > data_size) {
      if (contiguous) {
        throw Error(
            fmt::format("safetensors file {} is truncated: tensor {} (and every tensor "
                        "after it) needs bytes past the end of the file (data_offsets [{}, "
                        "{}]; data section is {} bytes, header promises {})",
                        f, name, e.begin, e.end, data_size, promised));
      }
      throw Error(
          fmt::format("safetensors file {}: tensor {}: data_offsets [{}, {}] point past the "
                      "end of the {}-byte data section",
                      f, name, e.begin, e.end, data_size));
    }
    if (i > 0 && e.begin < entries[i - 1].end) {
      const auto& prev = entries[i - 1];
      throw Error(
          fmt::format("safetensors file {}: tensor {}: data_offsets [{}, {}] overlap tensor "
                      "{} at [{}, {}]",
                      f, name, e.begin, e.end, tensors_[prev.index].name, prev.begin, prev.end));
    }
  }
  std::vector<TensorView> ordered;
  ordered.reserve(tensors_.size());
  for (const auto& e : entries) {
    TensorView v = std::move(tensors_[e.index]);
    v.data = data + e.begin;
    ordered.push_back(std::move(v));
  }
  tensors_ = std::move(ordered);
  for (size_t i = 0; i < tensors_.size(); ++i) index_.emplace(tensors_[i].name, i);
}

const TensorView* SafetensorsFile::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

const TensorView& SafetensorsFile::tensor(std::string_view name) const {
  if (const TensorView* t = find(name)) return *t;
  throw Error(fmt::format("safetensors file {} has no tensor {}", path_, name));
}

}  // namespace nibble
