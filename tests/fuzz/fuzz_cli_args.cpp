// libFuzzer target: the command line's runtime-flag parsing and option resolution. Input is a
// NUL-separated argument list; every outcome must be parsed options or a nibble::Error.
#include <nibble/error.hpp>
#include <nibble/options.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "cli_options.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> args;
  std::string cur;
  for (size_t i = 0; i < size && args.size() < 64; ++i) {
    if (data[i] == 0) {
      args.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(char(data[i]));
    }
  }
  if (!cur.empty()) args.push_back(cur);
  try {
    nibble::cli::CommonFlags flags = nibble::cli::take_common_flags(args);
    // A config file named by fuzz input would read arbitrary paths: keep resolution in memory.
    flags.config.clear();
    nibble::RuntimeOptions o = nibble::cli::resolve_options(flags);
    (void)nibble::split_list(o.backend, ',');
    for (const auto& a : args) (void)nibble::split_list(a, ':');
  } catch (const nibble::Error&) {
  }
  return 0;
}
