#include "io/regular_file.hpp"

#include <nibble/error.hpp>
#include <nibble/untrusted_text.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "file_kind.hpp"
#include "text/name_text.hpp"

namespace nibble::detail {

RegularFile::RegularFile(const std::filesystem::path& path, const std::string& what)
    : label_(what + " " + detail::name_text(path.string())) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever.
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd_ < 0) throw Error("cannot open " + label_ + ": " + std::strerror(errno));
  if (::fstat(fd_, &stat_) != 0) {
    const int err = errno;
    ::close(fd_);
    throw Error("cannot stat " + label_ + ": " + std::strerror(err));
  }
  if (!S_ISREG(stat_.st_mode)) {
    ::close(fd_);
    throw Error(label_ + " is " + file_kind(stat_.st_mode) + "; expected a regular file");
  }
}

RegularFile::~RegularFile() {
  if (fd_ >= 0) ::close(fd_);
}

std::string RegularFile::read_all(uint64_t limit) const {
  if (size() > limit) {
    throw Error(label_ + " is " + std::to_string(size()) + " bytes, larger than the " +
                std::to_string(limit) + "-byte limit");
  }
  std::string text(size_t(size()), '\0');
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::pread(fd_, text.data() + done, text.size() - done, off_t(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error("cannot read " + label_ + ": " + std::strerror(errno));
    if (n == 0) throw Error("cannot read " + label_ + ": it shrank while being read");
    done += size_t(n);
  }
  return text;
}

std::string read_regular_file(const std::filesystem::path& path, uint64_t limit,
                              const std::string& what) {
  return RegularFile(path, what).read_all(limit);
}

}  // namespace nibble::detail
