// OutputFile: an exclusive, unpredictable temporary beside the target, then fsync and rename.
#include <nibble/error.hpp>
#include <nibble/output_file.hpp>
#include <nibble/untrusted_text.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

#include "file_kind.hpp"

namespace fs = std::filesystem;

namespace nibble {

namespace {

std::string shown(const fs::path& p) { return escape_untrusted(p.string()); }

std::string errno_text() { return std::strerror(errno); }

// 64 random bits as hex: the temporary's name cannot be guessed in advance and planted.
std::string random_suffix() {
  static thread_local std::mt19937_64 rng = [] {
    std::random_device device;
    std::seed_seq seed{device(), device(), device(), device(), unsigned(::getpid())};
    return std::mt19937_64(seed);
  }();
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(rng()));
  return buf;
}

}  // namespace

void check_output_target(const fs::path& target) {
  struct stat st;
  if (::lstat(target.c_str(), &st) != 0) {
    if (errno == ENOENT) return;
    throw Error("output " + shown(target) + ": cannot be examined: " + errno_text());
  }
  if (S_ISREG(st.st_mode)) return;
  std::string what = detail::file_kind(st.st_mode);
  if (S_ISLNK(st.st_mode)) {
    std::error_code ec;
    fs::path to = fs::read_symlink(target, ec);
    if (!ec) what += " to " + shown(to);
  }
  throw Error("output " + shown(target) + " is " + what +
              "; nibble writes only to a new path or over a regular file (remove it or choose "
              "another path)");
}

OutputFile::OutputFile(const fs::path& target) : target_(target) {
  if (target.empty()) throw Error("output path is empty");
  if (!target.has_filename()) throw Error("output " + shown(target) + " names a directory");
  check_output_target(target_);
  fs::path dir = target_.parent_path();
  if (dir.empty()) dir = ".";
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw Error("output " + shown(target_) + ": its folder " + shown(dir) + " does not exist");
  // O_EXCL with O_CREAT never follows a link at the name, O_NOFOLLOW says so again: a planted
  // temporary name fails here instead of redirecting the write.
  for (int attempt = 0; attempt < 16 && fd_ < 0; ++attempt) {
    temp_ = dir / ("." + target_.filename().string() + "." + random_suffix() + ".tmp");
    fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd_ < 0 && errno != EEXIST)
      throw Error("output " + shown(target_) + ": cannot create a temporary in " + shown(dir) +
                  ": " + errno_text());
  }
  if (fd_ < 0)
    throw Error("output " + shown(target_) + ": no free temporary name in " + shown(dir));
}

OutputFile::~OutputFile() {
  if (!committed_) discard();
}

void OutputFile::discard() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!temp_.empty()) ::unlink(temp_.c_str());
}

void OutputFile::write(std::span<const std::byte> bytes) {
  if (fd_ < 0) throw Error("output " + shown(target_) + ": written after it was closed");
  const auto* p = reinterpret_cast<const char*>(bytes.data());
  size_t left = bytes.size();
  while (left > 0) {
    const ssize_t n = ::write(fd_, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      throw Error("output " + shown(target_) +
                  ": writing failed: " + (n < 0 ? errno_text() : std::string("no progress")));
    p += n;
    left -= size_t(n);
  }
}

void OutputFile::write(std::string_view text) {
  write(std::span<const std::byte>(reinterpret_cast<const std::byte*>(text.data()), text.size()));
}

void OutputFile::commit() {
  if (fd_ < 0) throw Error("output " + shown(target_) + ": committed twice");
  if (::fsync(fd_) != 0)
    throw Error("output " + shown(target_) + ": fsync failed: " + errno_text());
  if (::close(fd_) != 0) {
    fd_ = -1;
    throw Error("output " + shown(target_) + ": close failed: " + errno_text());
  }
  fd_ = -1;
  // Something may have appeared at the target while the data was written.
  check_output_target(target_);
  if (::rename(temp_.c_str(), target_.c_str()) != 0)
    throw Error("output " + shown(target_) +
                ": cannot rename the temporary over it: " + errno_text());
  committed_ = true;
  fs::path dir = target_.parent_path();
  if (dir.empty()) dir = ".";
  // The rename itself reaches the disk only with its folder.
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

void write_output_file(const fs::path& target, std::string_view text) {
  OutputFile out(target);
  out.write(text);
  out.commit();
}

}  // namespace nibble
