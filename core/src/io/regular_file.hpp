// Opening files named by the user or by a checkpoint: only regular files are read, and the check
// happens on the opened descriptor (fstat), after an open that cannot block on a FIFO.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <filesystem>
#include <string>

namespace nibble::detail {

/// A read-only descriptor of the regular file `path` (closed by the destructor), or an Error that
/// names `what` and the path and says what it is instead (FIFO, directory, device, missing).
class RegularFile {
 public:
  RegularFile(const std::filesystem::path& path, const std::string& what);
  ~RegularFile();
  RegularFile(const RegularFile&) = delete;
  RegularFile& operator=(const RegularFile&) = delete;

  /// The open descriptor.
  int fd() const { return fd_; }
  /// The file's size in bytes, from fstat.
  uint64_t size() const { return uint64_t(stat_.st_size); }
  /// Read the whole file; Error naming `what` when it is larger than `limit` bytes.
  std::string read_all(uint64_t limit) const;

 private:
  int fd_ = -1;
  struct stat stat_ {};
  std::string label_;  // "what 'path'", escaped, for messages
};

/// The contents of the regular file `path` of at most `limit` bytes (see RegularFile).
std::string read_regular_file(const std::filesystem::path& path, uint64_t limit,
                              const std::string& what);

}  // namespace nibble::detail
