// The suite inside the process that runs it (the child, normally): the list of checks, built
// once the plugin is loaded, and the sections that contribute to it.
#pragma once

#include <nibble/conformance/conformance.hpp>

#include <functional>
#include <string>
#include <vector>

#include "plugin_host.hpp"

namespace nibble::conformance {

/// One named check; `run` fills passed and message (the runner fills the name).
struct Check {
  std::string name;
  std::function<void(CheckResult&)> run;
};

/// What every section may look at: the options, the loaded plugin and what loading observed.
struct SuiteContext {
  Options options;
  PluginUnderTest plugin;
  std::string file_stem_name;  ///< <name> of libnibble_<name>.so ("" when the file is misnamed)
  int threads_before_load = 0;
  int threads_after_entry = 0;
  int threads_after_probe = 0;
  nibble_status probe_status = NIBBLE_OK;
  nibble_probe_result probe{};
  bool probe_escaped = false;
};

/// The ABI hygiene checks (exports, sizes, versions, names, pointers, threads, entry twice).
std::vector<Check> abi_checks(SuiteContext& ctx);
/// The honesty grid: linear, dense and MoE configurations for every kernel of the plugin.
std::vector<Check> grid_checks(SuiteContext& ctx);
/// Undefined descriptors, bad tensors, strided tensors and concurrent forward per kernel.
std::vector<Check> robustness_checks(SuiteContext& ctx);
/// The upstream-packed GPTQ/AWQ fixtures through every kernel that accepts them.
std::vector<Check> fixture_checks(SuiteContext& ctx);

/// Entry starts no thread; probe starts none either, except a device plugin's (its runtime's).
void check_threads(const SuiteContext& ctx, CheckResult& r);
/// Shut the load down: every thread the plugin started ends, save a device runtime's, which a
/// second load in the same process must not add to.
void check_shutdown(const SuiteContext& ctx, CheckResult& r);

/// Load the plugin, build the check list and run checks [first, end), reporting each check's
/// start and result. The shutdown check always runs last. Returns the plugin's description line.
void run_suite(const Options& options, size_t first,
               const std::function<void(const std::string& key, const std::string& value)>& info,
               const std::function<void(size_t index, const std::string& name)>& begin,
               const std::function<void(size_t index, const CheckResult& result)>& done);

/// Say which step of the running check comes next ("M 7, bf16"), so that a crash report can name
/// it. A no-op unless a reporter is set.
void report_step(const std::string& step);
/// Where report_step goes (the child streams it to the parent); empty to stop.
void set_step_reporter(std::function<void(const std::string&)> reporter);

/// "a; b; c" of at most `limit` items, then "; ... and N more".
std::string join_limited(const std::vector<std::string>& items, size_t limit);

/// printf-style formatting of a double in %.2e.
std::string sci(double v);

}  // namespace nibble::conformance
