// The plugin conformance kit: runs the standard suite (ABI hygiene, the can_implement honesty
// grid, robustness, the upstream-packed fixtures) against one plugin file, through the C ABI the
// way a host drives it, in a child process so that a crash or a hang becomes a failed check.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace nibble::conformance {

/// The outcome of one check.
struct CheckResult {
  std::string name;     ///< "section/what", e.g. "honesty/npu_ref/linear_antiquant/b4 g64 ..."
  bool passed = false;  ///< the plugin did what the contract asks
  std::string message;  ///< why it failed, or what was covered when it passed
};

/// What to check and how.
struct Options {
  std::string plugin_path;    ///< the libnibble_<name>.so to check
  std::string backend;        ///< expected backend name ("" = take it from the file name)
  bool quick = false;         ///< the reduced grid (what ctest runs)
  std::string fixtures_dir;   ///< directory holding the upstream-packed fixtures ("" = default)
  int timeout_seconds = 900;  ///< for the whole plugin, all child processes together
  int threads = 2;            ///< nibble_exec.num_threads and the host's thread budget
  bool fork_child = true;     ///< false: run in this process (debugging; a crash kills the kit)
  /// Called for every result as it arrives (progress output); may be empty.
  std::function<void(const CheckResult&)> on_result;
};

/// Everything one run found.
struct Report {
  std::string plugin_path;
  std::string backend;      ///< the plugin's name (as it reported it; "" when it never loaded)
  std::string description;  ///< "template 0.1.0 (you), ABI 1.1" — what the entry point said
  int host_abi_minor = 0;   ///< the minor of the ABI layer the kit was compiled with
  std::vector<CheckResult> checks;
  double seconds = 0;

  /// Number of passed checks.
  size_t passed() const;
  /// Number of failed checks.
  size_t failed() const;
};

/// Run the suite on options.plugin_path (in a child process unless fork_child is false).
Report run(const Options& options);

/// The directory the kit uses for fixtures when none is given: $NIBBLE_CONFORMANCE_FIXTURES, the
/// source tree's conformance/fixtures, or <prefix>/share/nibble/conformance/fixtures beside the
/// executable.
std::string default_fixtures_dir();

/// The report as text: failures in full, a tally per section, every check when `verbose`, and a
/// last line exactly "N passed, N failed".
std::string format_text(const Report& report, bool verbose);

/// The report as one JSON document (plugin, checks [{name, passed, message}], passed, failed).
std::string format_json(const Report& report);

/// The command line front end shared by `nibble conformance` and `nibble-conformance`:
/// --plugin FILE.so [--backend NAME] [--quick] [--json] [--fixtures DIR] [--timeout S]
/// [--threads N] [--verbose] [--no-fork]. argv[0] is the command's name. Returns 0 when every
/// check passed, 1 on any failure, 2 on bad usage.
int main_with_args(int argc, char** argv);

}  // namespace nibble::conformance
