// Writing a file the user named (nibble run --output, nibble quantize --out) without ever
// touching anything else: the bytes go to an unpredictable temporary beside the target, created
// exclusively and never through a link, and replace the target only when complete and on disk.
// What is at the target must be a regular file or nothing: a FIFO, device, directory or symbolic
// link there is refused, so a planted link cannot redirect the write and /dev/null stays a device.
#pragma once

#include <nibble/export.hpp>

#include <cstddef>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>

namespace nibble {

/// An output file being written. commit() makes it appear at its path; destroying an uncommitted
/// OutputFile removes the temporary and leaves the target as it was.
class NIBBLE_API OutputFile {
 public:
  /// Check the target (nothing there, or a regular file) and create the temporary beside it;
  /// throws nibble::Error naming the path and what is in the way.
  explicit OutputFile(const std::filesystem::path& target);
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  /// Append bytes; throws nibble::Error naming the target on a short or failed write.
  void write(std::span<const std::byte> bytes);
  /// Append text.
  void write(std::string_view text);
  /// fsync the data, check the target again, rename the temporary over it and fsync the folder.
  void commit();

  /// The temporary's path (for tests and messages).
  const std::filesystem::path& temporary() const { return temp_; }

 private:
  std::filesystem::path target_, temp_;
  int fd_ = -1;
  bool committed_ = false;
  void discard() noexcept;
};

/// Throws nibble::Error when something other than a regular file is at `target` (saying what it
/// is: a symbolic link, a FIFO, a directory, a device, ...); nothing there is fine.
NIBBLE_API void check_output_target(const std::filesystem::path& target);

/// Write `text` to `target` through an OutputFile.
NIBBLE_API void write_output_file(const std::filesystem::path& target, std::string_view text);

}  // namespace nibble
