// The kit's command line and report formats, shared by `nibble conformance` and the standalone
// `nibble-conformance`.
#include <nibble/error.hpp>
#include <nibble/parse_number.hpp>
#include <nibble/registry.hpp>
#include <nibble/untrusted_text.hpp>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>

#include "suite.hpp"

namespace nibble::conformance {

namespace fs = std::filesystem;

std::string default_fixtures_dir() {
  if (const char* env = std::getenv("NIBBLE_CONFORMANCE_FIXTURES"); env && *env) return env;
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    fs::path installed = exe.parent_path().parent_path() / "share/nibble/conformance/fixtures";
    if (fs::is_directory(installed, ec)) return installed.string();
  }
#ifdef NIBBLE_CONFORMANCE_SOURCE_FIXTURES
  if (fs::is_directory(NIBBLE_CONFORMANCE_SOURCE_FIXTURES, ec))
    return NIBBLE_CONFORMANCE_SOURCE_FIXTURES;
#endif
  return "";
}

std::string format_text(const Report& report, bool verbose) {
  std::string out = "nibble conformance: " + report.plugin_path + "\n";
  out += "plugin: " +
         (report.description.empty() ? std::string("(did not load)") : report.description) +
         "; kit ABI 1." + std::to_string(report.host_abi_minor) + "; " +
         std::to_string(int(report.seconds + 0.5)) + " s\n";
  std::map<std::string, std::pair<size_t, size_t>> sections;  // section -> passed, failed
  std::vector<std::string> order;
  for (const CheckResult& c : report.checks) {
    std::string section = c.name.substr(0, c.name.find('/'));
    if (!sections.count(section)) order.push_back(section);
    auto& tally = sections[section];
    (c.passed ? tally.first : tally.second)++;
    if (!c.passed)
      out += "FAIL " + c.name + ": " + c.message + "\n";
    else if (verbose)
      out += "pass " + c.name + (c.message.empty() ? "" : ": " + c.message) + "\n";
  }
  std::string tally;
  for (const std::string& s : order)
    tally += (tally.empty() ? "" : ", ") + s + " " + std::to_string(sections[s].first) + "/" +
             std::to_string(sections[s].first + sections[s].second);
  if (!tally.empty()) out += "sections (passed/checks): " + tally + "\n";
  out +=
      std::to_string(report.passed()) + " passed, " + std::to_string(report.failed()) + " failed\n";
  return out;
}

std::string format_json(const Report& report) {
  nlohmann::json checks = nlohmann::json::array();
  for (const CheckResult& c : report.checks)
    checks.push_back({{"name", c.name}, {"passed", c.passed}, {"message", c.message}});
  nlohmann::json j = {{"plugin", report.plugin_path},
                      {"backend", report.backend},
                      {"description", report.description},
                      {"kit_abi", "1." + std::to_string(report.host_abi_minor)},
                      {"seconds", report.seconds},
                      {"checks", checks},
                      {"passed", report.passed()},
                      {"failed", report.failed()}};
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

namespace {

const char* kUsage =
    "usage: %s --plugin FILE.so [--backend NAME] [--quick] [--json] [--fixtures DIR]\n"
    "       [--timeout SECONDS] [--threads N] [--verbose] [--no-fork]\n\n"
    "Checks a backend plugin against the nibble ABI and its numeric contract: ABI hygiene,\n"
    "the can_implement honesty grid, robustness and the upstream-packed fixtures. The plugin\n"
    "runs in a child process; a crash or a hang becomes a failed check.\n\n"
    "  --plugin FILE.so   the plugin file (libnibble_<name>.so)\n"
    "  --backend NAME     the backend it must be; alone, checks libnibble_NAME.so from the\n"
    "                     plugin directory beside libnibble\n"
    "  --quick            the reduced grid (what ctest runs)\n"
    "  --json             print the report as JSON\n"
    "  --fixtures DIR     where gptq_v1_sym_g128/, awq_gemm_g128/, moe_gptq_e8_top2/ are\n"
    "  --timeout SECONDS  for the whole plugin (default 900)\n"
    "  --threads N        threads per forward call and the host's budget (default 2)\n"
    "  --verbose          list passed checks too, and each result as it arrives (stderr)\n"
    "  --no-fork          run in this process (debugging: a crash ends the kit)\n\n"
    "The report ends with a line \"N passed, N failed\"; the exit code is 1 on any failure.\n\n"
    "example: nibble conformance --plugin build/libnibble_acme.so --quick\n";

}  // namespace

int main_with_args(int argc, char** argv) {
  Options o;
  bool json = false, verbose = false;
  const char* self = argc > 0 ? argv[0] : "nibble-conformance";
  auto usage_error = [&](const std::string& why) {
    std::fprintf(stderr, "%s: %s\n\n", self, why.c_str());
    std::fprintf(stderr, kUsage, self);
    return 2;
  };
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    if (a == "-h" || a == "--help") {
      std::printf(kUsage, self);
      return 0;
    } else if (a == "--plugin" || a == "--backend" || a == "--fixtures" || a == "--timeout" ||
               a == "--threads") {
      const char* v = value();
      if (!v) return usage_error(a + " needs a value");
      if (a == "--plugin") o.plugin_path = v;
      if (a == "--backend") o.backend = v;
      if (a == "--fixtures") o.fixtures_dir = v;
      if (a == "--timeout" || a == "--threads") {
        // A day of timeout; threads capped as the runtime caps them.
        const int64_t hi = a == "--timeout" ? 86400 : 4096;
        try {
          (a == "--timeout" ? o.timeout_seconds : o.threads) = int(parse_integer(v, 1, hi, a));
        } catch (const nibble::Error& e) {
          return usage_error(e.what());
        }
      }
    } else if (a == "--quick") {
      o.quick = true;
    } else if (a == "--json") {
      json = true;
    } else if (a == "--verbose") {
      verbose = true;
    } else if (a == "--no-fork") {
      o.fork_child = false;
    } else {
      return usage_error("unknown argument " + quoted_untrusted(a));
    }
  }
  if (o.plugin_path.empty() && !o.backend.empty())
    o.plugin_path = Registry::default_plugin_dir() + "/libnibble_" + o.backend + ".so";
  if (o.plugin_path.empty()) return usage_error("--plugin FILE.so (or --backend NAME) is required");
  std::error_code ec;
  if (!fs::is_regular_file(o.plugin_path, ec)) {
    std::fprintf(stderr, "%s: %s is not a file\n", self, o.plugin_path.c_str());
    return 2;
  }
  o.plugin_path = fs::absolute(o.plugin_path).string();
  if (verbose)
    o.on_result = [](const CheckResult& r) {
      std::fprintf(stderr, "%s %s\n", r.passed ? "pass" : "FAIL", r.name.c_str());
    };
  Report report = run(o);
  const std::string text = json ? format_json(report) : format_text(report, verbose);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
  return report.failed() == 0 && !report.checks.empty() ? 0 : 1;
}

}  // namespace nibble::conformance
