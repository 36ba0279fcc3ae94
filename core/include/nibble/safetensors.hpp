// safetensors files: a validating, memory-mapped, zero-copy reader (single files and sharded
// checkpoints via model.safetensors.index.json) and a writer.
#pragma once

#include <nibble/export.hpp>

#include <dlpack/dlpack.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace nibble {

/// The element types safetensors files may hold (the ones nibble accepts).
enum class DType { F16, BF16, F32, F64, I8, U8, I16, I32, I64, BOOL };

/// The safetensors spelling of a dtype ("F16", "I32", ...).
NIBBLE_API std::string_view safetensors_dtype_name(DType dtype);
/// Bytes per element.
NIBBLE_API size_t dtype_size(DType dtype);
/// Parse a safetensors dtype name; nullopt for an unknown one.
NIBBLE_API std::optional<DType> parse_dtype(std::string_view name);
/// The DLPack dtype of `dtype` (BOOL maps to uint8: DLPack 0.6 has no bool).
NIBBLE_API DLDataType to_dlpack(DType dtype);
/// The safetensors dtype of a DLPack f16/bf16/f32 dtype; throws nibble::Error otherwise.
NIBBLE_API DType from_dlpack(DLDataType dtype);

/// Hard limits checked before anything the header claims is allocated.
inline constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // 100 MiB of JSON
inline constexpr size_t kMaxTensorsPerFile = 1u << 20;
inline constexpr size_t kMaxRank = 8;

/// A borrowed view of one tensor inside a mapped file (or an owned buffer). Data may be
/// unaligned: read elements through the accessors, which copy bytes.
struct NIBBLE_API TensorView {
  std::string name;          ///< full tensor name, as stored (escape it before printing)
  std::string file;          ///< the file it lives in, already escaped for messages
  DType dtype = DType::F32;  ///< element type
  std::vector<int64_t> shape;
  const std::byte* data = nullptr;
  size_t nbytes = 0;

  /// Number of elements (product of the shape; 1 for a scalar).
  int64_t numel() const;
  /// Shape as "[a, b]".
  std::string shape_string() const;
  /// Element i of an I32 tensor (little-endian on disk).
  int32_t i32(size_t i) const;
  /// Element i of a F16/BF16/F32/F64 tensor as double (exact).
  double as_double(size_t i) const;
  /// The raw bytes.
  std::span<const std::byte> bytes() const { return {data, nbytes}; }
};

/// One safetensors file, validated at open and mapped read-only for its life. Validation follows
/// the reference reader: a regular file, a header of at most kMaxHeaderBytes holding one JSON
/// object and nothing after it but spaces, no duplicate keys, and tensors that tile the data
/// section exactly (no holes, overlaps or trailing bytes).
class NIBBLE_API SafetensorsFile {
 public:
  /// Map and validate `path`; throws nibble::Error naming the file (and tensor, and the byte
  /// offset where it applies) on any defect, and without blocking when `path` is a FIFO.
  static std::shared_ptr<const SafetensorsFile> open(const std::filesystem::path& path);
  /// Validate an in-memory image (copied); `label` stands in for the file name in messages.
  static std::shared_ptr<const SafetensorsFile> from_bytes(std::span<const std::byte> bytes,
                                                           const std::string& label);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  /// The file's path (or label).
  const std::string& path() const { return path_; }
  /// The `__metadata__` string map (empty when absent).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  /// Every tensor, in data-offset order.
  const std::vector<TensorView>& tensors() const { return tensors_; }
  /// The tensor called `name`, or nullptr.
  const TensorView* find(std::string_view name) const;
  /// The tensor called `name`; throws nibble::Error naming the file when absent.
  const TensorView& tensor(std::string_view name) const;

 private:
  SafetensorsFile() = default;
  void parse(const std::byte* image, size_t size);

  std::string path_;
  void* map_ = nullptr;  // mmap'd region (munmap'd in the destructor), or null
  size_t map_size_ = 0;
  std::vector<std::byte> owned_;  // the image when built from bytes
  std::map<std::string, std::string> metadata_;
  std::vector<TensorView> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
};

/// A set of tensors spread over one or more files: a single .safetensors file, or the shards
/// named by a model.safetensors.index.json.
class NIBBLE_API TensorStore {
 public:
  /// Open `model.safetensors.index.json` (sharded) or a single .safetensors file.
  static TensorStore open(const std::filesystem::path& path);
  /// The tensor called `name`, or nullptr.
  const TensorView* find(std::string_view name) const;
  /// The tensor called `name`; throws nibble::Error when absent.
  const TensorView& tensor(std::string_view name) const;
  /// Every tensor name, sorted.
  std::vector<std::string> names() const;
  /// The files behind this store.
  const std::vector<std::shared_ptr<const SafetensorsFile>>& files() const { return files_; }
  /// What the store was opened from, escaped for messages.
  const std::string& source() const { return source_; }

 private:
  std::string source_;
  std::vector<std::shared_ptr<const SafetensorsFile>> files_;
  std::map<std::string, const TensorView*, std::less<>> index_;
};

/// An owned tensor, e.g. a scheme's encoded qweight, ready to write.
struct NIBBLE_API OwnedTensor {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<std::byte> data;

  /// A borrowed view named `name` (file "<memory>"); valid while this object lives unchanged.
  TensorView view(const std::string& name) const;
  /// A zero-filled tensor of the given dtype and shape.
  static OwnedTensor zeros(DType dtype, std::vector<int64_t> shape);
  /// Set element i of an I32 tensor.
  void set_i32(size_t i, int32_t v);
};

/// One tensor to write: its name and a view of its bytes.
struct TensorToWrite {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::span<const std::byte> data;
};

/// Write a safetensors file (tensors in the given order, header padded to 8 bytes) atomically
/// through an OutputFile (output_file.hpp: a FIFO, device, directory or link at `path` is
/// refused); throws nibble::Error on an I/O failure, a duplicate name or a size that contradicts
/// dtype × shape.
NIBBLE_API void write_safetensors(const std::filesystem::path& path,
                                  const std::vector<TensorToWrite>& tensors,
                                  const std::map<std::string, std::string>& metadata = {});

/// The same, gathering the tensors from a name → OwnedTensor map (written in name order).
NIBBLE_API void write_safetensors(const std::filesystem::path& path,
                                  const std::map<std::string, OwnedTensor>& tensors,
                                  const std::map<std::string, std::string>& metadata = {});

}  // namespace nibble
