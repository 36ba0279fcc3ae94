// Progress for long steps: a bar redrawn in place on a terminal, plain lines otherwise, nothing
// when quiet. Writes to stderr so that stdout stays the result (a table or JSON).
#pragma once

#include <string>

namespace nibble::cli {

class Progress {
 public:
  /// A task of `total` steps called `what`; silent when `quiet`.
  Progress(std::string what, int total, bool quiet);
  ~Progress();
  /// One more step done, `detail` saying which.
  void step(const std::string& detail);

 private:
  std::string what_;
  int total_, done_ = 0;
  bool quiet_, tty_;
};

}  // namespace nibble::cli
