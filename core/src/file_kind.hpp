// Names of file types for messages that refuse a path ("a FIFO", "a directory").
#pragma once

#include <sys/stat.h>

namespace nibble::detail {

/// What a stat mode says the file is, with its article: "a regular file", "a FIFO", ...
inline const char* file_kind(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "a special file";
}

}  // namespace nibble::detail
