// The suite's driver inside the process that runs it: load the plugin while watching the thread
// count, build the check list (the same list in every child, so a resumed child can skip to the
// check after a crash), run the checks in order and end with shutdown.
#include "suite.hpp"

#include <algorithm>
#include <cstdio>
#include <regex>

namespace nibble::conformance {

std::string join_limited(const std::vector<std::string>& items, size_t limit) {
  std::string out;
  for (size_t i = 0; i < items.size() && i < limit; ++i) out += (i ? "; " : "") + items[i];
  if (items.size() > limit) out += "; ... and " + std::to_string(items.size() - limit) + " more";
  return out;
}

namespace {
std::function<void(const std::string&)>& step_reporter() {
  static std::function<void(const std::string&)> reporter;
  return reporter;
}
}  // namespace

void report_step(const std::string& step) {
  if (step_reporter()) step_reporter()(step);
}

void set_step_reporter(std::function<void(const std::string&)> reporter) {
  step_reporter() = std::move(reporter);
}

std::string sci(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2e", v);
  return buf;
}

namespace {

std::string file_stem_name(const std::string& path) {
  static const std::regex pattern(R"(^libnibble_([a-z0-9_]+)\.so$)");
  std::string base =
      path.substr(path.find_last_of('/') == std::string::npos ? 0 : path.find_last_of('/') + 1);
  std::smatch m;
  return std::regex_match(base, m, pattern) ? m[1].str() : std::string();
}

}  // namespace

void run_suite(const Options& options, size_t first,
               const std::function<void(const std::string&, const std::string&)>& info,
               const std::function<void(size_t, const std::string&)>& begin,
               const std::function<void(size_t, const CheckResult&)>& done) {
  SuiteContext ctx;
  ctx.options = options;
  ctx.file_stem_name = file_stem_name(options.plugin_path);
  ctx.threads_before_load = thread_count();
  ctx.plugin = load_plugin(options.plugin_path, options.threads);
  ctx.threads_after_entry = thread_count();
  const bool loaded = ctx.plugin.error.empty();
  if (loaded && ctx.plugin.desc.probe) {
    ctx.probe.struct_size = sizeof ctx.probe;
    ctx.probe_escaped = !guarded(
        "probe", [&] { ctx.probe_status = sdk::host::probe_load(ctx.plugin.desc, &ctx.probe); });
  }
  ctx.threads_after_probe = thread_count();

  std::vector<Check> checks;
  if (!loaded) {
    checks.push_back({"abi/load", [&](CheckResult& r) {
                        r.passed = false;
                        r.message = ctx.plugin.error;
                      }});
  } else {
    const nibble_plugin& p = ctx.plugin.desc;
    info("backend", p.name ? p.name : "");
    info("description", std::string(p.name ? p.name : "?") + " " + (p.version ? p.version : "?") +
                            " (" + (p.vendor ? p.vendor : "?") + "), ABI " +
                            std::to_string(p.abi_major) + "." + std::to_string(p.abi_minor));
    auto append = [&](std::vector<Check> more) {
      for (auto& c : more) checks.push_back(std::move(c));
    };
    append(abi_checks(ctx));
    if (!ctx.probe.available) {
      checks.push_back({"honesty/backend available here", [&](CheckResult& r) {
                          r.passed = false;
                          r.message = "the probe says the backend cannot run on this machine (" +
                                      std::string(ctx.probe.detail) +
                                      "); its kernels were not exercised";
                        }});
    } else {
      append(grid_checks(ctx));
      append(robustness_checks(ctx));
      append(fixture_checks(ctx));
    }
    if (p.shutdown)
      checks.push_back({"lifecycle/shutdown leaves no thread behind",
                        [&](CheckResult& r) { check_shutdown(ctx, r); }});
  }

  for (size_t i = first; i < checks.size(); ++i) {
    // The shutdown check must come last even in a resumed child; it is the list's last entry.
    begin(i, checks[i].name);
    CheckResult r;
    r.name = checks[i].name;
    r.passed = true;
    escaped_exceptions().clear();
    try {
      checks[i].run(r);
    } catch (const std::exception& e) {
      r.passed = false;
      r.message = std::string("the kit could not run this check: ") + e.what();
    }
    if (!escaped_exceptions().empty()) {
      std::vector<std::string> distinct;
      for (const std::string& e : escaped_exceptions())
        if (std::find(distinct.begin(), distinct.end(), e) == distinct.end()) distinct.push_back(e);
      r.passed = false;
      r.message = "C++ exceptions crossed the C ABI (" + join_limited(distinct, 4) + ")" +
                  (r.message.empty() ? "" : "; " + r.message);
    }
    done(i, r);
  }
}

}  // namespace nibble::conformance
