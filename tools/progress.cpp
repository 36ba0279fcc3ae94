#include "progress.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace nibble::cli {

Progress::Progress(std::string what, int total, bool quiet)
    : what_(std::move(what)), total_(std::max(total, 1)), quiet_(quiet), tty_(isatty(2) == 1) {}

Progress::~Progress() {
  if (!quiet_ && tty_ && done_ > 0) std::fprintf(stderr, "\n");
}

void Progress::step(const std::string& detail) {
  ++done_;
  if (quiet_) return;
  if (!tty_) {
    std::fprintf(stderr, "%s [%d/%d] %s\n", what_.c_str(), done_, total_, detail.c_str());
    return;
  }
  const int width = 24;
  int filled = width * std::min(done_, total_) / total_;
  std::string bar(size_t(filled), '#');
  bar.resize(size_t(width), ' ');
  std::string text = detail.size() > 48 ? detail.substr(0, 45) + "..." : detail;
  std::fprintf(stderr, "\r\033[K%s [%s] %d/%d %s", what_.c_str(), bar.c_str(), done_, total_,
               text.c_str());
  std::fflush(stderr);
}

}  // namespace nibble::cli
