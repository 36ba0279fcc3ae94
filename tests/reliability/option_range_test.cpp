// Numbers from flags and environment variables: every numeric flag of every nibble command
// refuses a value outside its range (overflowing, negative, fractional, with trailing text or
// empty) with an error that names the flag and the accepted range, and never an internal error,
// a crash or a silently wrapped value; the SDK's env_integer ignores a bad plugin variable with a
// warning through the host's log.
#include <nibble/sdk/env.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

namespace {

struct Outcome {
  int status = -1;
  std::string output;
};

// Runs the nibble CLI with `args` (already shell-quoted where needed), stdout and stderr merged.
Outcome nibble_cli(const std::string& args) {
  std::string cmd = std::string(NIBBLE_CLI) + " " + args + " 2>&1";
  Outcome o;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return o;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) o.output.append(buf, n);
  int st = pclose(p);
  o.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return o;
}

std::string scratch(const std::string& tag) {
  fs::path d = fs::path(NIBBLE_BUILD_DIR) / "tests" / "option_ranges" /
               (tag + "_" + std::to_string(getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d.string();
}

const std::string kRuntime =
    std::string("--no-default-plugin-dir --plugin-dir ") + NIBBLE_PLUGIN_BUILD_DIR;

struct Case {
  std::string args;
  std::vector<std::string> says;  // substrings the error must contain
};

void expect_refused(const Case& c) {
  Outcome o = nibble_cli(c.args);
  EXPECT_TRUE(o.status == 1 || o.status == 2) << c.args << " exited " << o.status << "\n"
                                              << o.output;
  EXPECT_THAT(o.output, Not(HasSubstr("internal error"))) << c.args;
  for (const auto& s : c.says) EXPECT_THAT(o.output, HasSubstr(s)) << c.args;
}

TEST(OptionRange, ThreadsIsCappedLikeTheEnvironmentAndTheConfigFile) {
  for (const char* bad : {"100000", "4097", "-1", "4294967297", "99999999999999999999", "4.5", "8x",
                          "0x10", "' 4'", "''"}) {
    std::string v = bad;
    if (v == "''")
      expect_refused({"backends " + kRuntime + " --threads ''", {"--threads needs a value"}});
    else
      expect_refused({"backends " + kRuntime + " --threads " + v, {"--threads", "[0, 4096]"}});
  }
  expect_refused({"backends " + kRuntime + " --threads=", {"--threads needs a value"}});
  EXPECT_EQ(nibble_cli("backends " + kRuntime + " --threads 4096").status, 0);
  EXPECT_EQ(nibble_cli("backends " + kRuntime + " --threads=0").status, 0);
}

TEST(OptionRange, QuantizeRefusesEveryOutOfRangeNumber) {
  const std::string out = scratch("quantize") + "/never";
  const std::string base = "quantize --synthetic --quiet --out " + out + " ";
  const std::vector<Case> cases = {
      {base + "--bits 4294967300 --layers 64x64", {"--bits", "[4, 8]"}},
      {base + "--bits 4294967304 --layers 64x64", {"--bits"}},
      {base + "--bits 5 --layers 64x64", {"--bits", "not 4 or 8"}},
      {base + "--bits -4 --layers 64x64", {"--bits", "[4, 8]"}},
      {base + "--bits 4.0 --layers 64x64", {"--bits"}},
      {base + "--group-size 0 --layers 64x64", {"--group-size", "-1"}},
      {base + "--group-size -2 --layers 64x64", {"--group-size", "[-1, 1048576]"}},
      {base + "--group-size 4294967424 --layers 64x64", {"--group-size", "[-1, 1048576]"}},
      {base + "--layers 0x64", {"--layers K", "[1, 1048576]"}},
      {base + "--layers 64x-8", {"--layers N", "[1, 1048576]"}},
      {base + "--layers 64x4294967360", {"--layers N", "[1, 1048576]"}},
      {base + "--layers 1048576x1048576", {"--layers", "elements"}},
      {base + "--layers 64x64,64", {"--layers item", "KxN"}},
      {base + "--moe 0:64:64:1", {"--moe E", "[1, 1024]"}},
      {base + "--moe 4294967304:64:64:2", {"--moe E", "[1, 1024]"}},
      {base + "--moe 8:64:64:9", {"--moe TOPK", "[1, 8]"}},
      {base + "--moe 8:64:64:0", {"--moe TOPK", "[1, 8]"}},
      {base + "--moe 8:64:64:4294967298", {"--moe TOPK", "[1, 8]"}},
      {base + "--moe 8:0:64:2", {"--moe K", "[1, 1048576]"}},
      {base + "--moe 1024:65536:65536:2", {"--moe", "elements"}},
      {base + "--seed -1 --layers 64x64", {"--seed", "[0, 9223372036854775807]"}},
      {base + "--seed 18446744073709551617 --layers 64x64", {"--seed"}},
      {base + "--shard-bytes -5 --layers 64x64", {"--shard-bytes", "[0, "}},
      {base + "--shard-bytes 1e9 --layers 64x64", {"--shard-bytes"}},
  };
  for (const Case& c : cases) expect_refused(c);
  EXPECT_FALSE(fs::exists(out)) << "a refused command wrote its output";
  // The edges of the ranges are accepted.
  Outcome ok =
      nibble_cli(base + "--bits 8 --group-size -1 --layers 64x32 --seed 9223372036854775807");
  EXPECT_EQ(ok.status, 0) << ok.output;
  EXPECT_THAT(ok.output, HasSubstr("8-bit"));
}

TEST(OptionRange, RunRefusesBadTopKAndAnEmptyBackendList) {
  const std::string data = std::string(NIBBLE_FIXTURES_DIR) + "/moe_gptq_e8_top2";
  const std::string out = scratch("run") + "/y.safetensors";
  const std::string base = "run " + kRuntime + " --model " + data +
                           " --layer model.layers.0.mlp --input " + data +
                           "/io.safetensors:x_m1 --output " + out + " ";
  for (const char* bad : {"0", "-1", "4294967298", "2x", "65537"})
    expect_refused({base + "--top-k " + bad, {"--top-k", "[1, 65536]"}});
  // Within the flag's range but more than the block's experts: the block says so.
  expect_refused({base + "--top-k 9", {"top-k 9"}});
  for (const char* list : {"','", "',,'", "' , '"})
    expect_refused({base + "--backend " + list, {"has an empty item"}});
  EXPECT_FALSE(fs::exists(out));
  Outcome ok = nibble_cli(base + "--top-k 2 --backend npu_ref");
  EXPECT_EQ(ok.status, 0) << ok.output;
}

TEST(OptionRange, ConformanceRefusesWrappedTimeoutsAndThreads) {
  const std::string plugin = std::string(NIBBLE_PLUGIN_BUILD_DIR) + "/libnibble_npu_ref.so";
  for (const char* bad : {"0", "-1", "4294967297", "86401", "5s"})
    expect_refused(
        {"conformance --plugin " + plugin + " --timeout " + bad, {"--timeout", "[1, 86400]"}});
  for (const char* bad : {"0", "4294967297", "4097"})
    expect_refused(
        {"conformance --plugin " + plugin + " --threads " + bad, {"--threads", "[1, 4096]"}});
}

TEST(OptionRange, RunChecksTheInputsKBeforeAllocatingTheOutput) {
  // An input of shape [4000000, 0] holds no bytes; M x N of output would be gigabytes.
  const std::string dir = scratch("empty_rows");
  const std::string header = R"({"x":{"dtype":"F32","shape":[4000000,0],"data_offsets":[0,0]}})";
  std::string file(8, '\0');
  const uint64_t len = header.size();
  std::memcpy(file.data(), &len, 8);
  file += header;
  FILE* f = std::fopen((dir + "/x.safetensors").c_str(), "wb");
  ASSERT_NE(f, nullptr);
  std::fwrite(file.data(), 1, file.size(), f);
  std::fclose(f);
  const std::string data = std::string(NIBBLE_FIXTURES_DIR) + "/gptq_v1_sym_g128";
  for (const char* layer : {"model.layers.0.self_attn.q_proj"}) {
    expect_refused({"run " + kRuntime + " --model " + data + " --layer " + layer + " --input " +
                        dir + "/x.safetensors:x --output " + dir + "/y.safetensors",
                    {"x.safetensors", "[4000000, 0]", "expected [M, 512]"}});
  }
  EXPECT_FALSE(fs::exists(dir + "/y.safetensors"));
}

TEST(OptionRange, UnknownFlagsAreEchoedEscaped) {
  // The shell's printf makes the raw ESC and BEL bytes.
  Outcome o = nibble_cli("backends \"$(printf -- '--\\033]0;owned\\007')\"");
  EXPECT_EQ(o.status, 2);
  EXPECT_THAT(o.output, HasSubstr("\\x1B"));
  EXPECT_EQ(o.output.find('\x1b'), std::string::npos);
  o = nibble_cli("\"$(printf '\\033[2J')\"");
  EXPECT_EQ(o.status, 2);
  EXPECT_EQ(o.output.find('\x1b'), std::string::npos);
  // A plugin folder whose name is not UTF-8 and holds ESC: listed escaped, as text and as JSON.
  for (const char* json : {"", " --json"}) {
    o = nibble_cli(
        "backends --no-default-plugin-dir --plugin-dir \"$(printf '/nonexistent/\\377\\033[2J')\"" +
        std::string(json));
    EXPECT_EQ(o.status, 0) << o.output;
    EXPECT_EQ(o.output.find('\x1b'), std::string::npos) << json;
    EXPECT_THAT(o.output, HasSubstr("\\xFF")) << json;
  }
}

// A host whose log the test reads.
std::vector<std::string> g_log;
void capture_log(void*, int32_t level, const char*, const char* message) {
  g_log.push_back(std::to_string(level) + ":" + message);
}

TEST(OptionRange, SdkEnvIntegerIgnoresABadValueWithAWarning) {
  using nibble::sdk::env_integer;
  using nibble::sdk::parse_integer_in;
  EXPECT_EQ(parse_integer_in("42", 0, 100), 42);
  EXPECT_EQ(parse_integer_in("+7", 0, 100), 7);
  EXPECT_EQ(parse_integer_in("-9223372036854775808", INT64_MIN, 0), INT64_MIN);
  EXPECT_EQ(parse_integer_in("9223372036854775807", 0, INT64_MAX), INT64_MAX);
  for (const char* bad : {"", "-", "+", "101", "-1", "4x", " 4", "4 ", "0x10", "1e3",
                          "9223372036854775808", "18446744073709551617"})
    EXPECT_EQ(parse_integer_in(bad, 0, 100), std::nullopt) << bad;
  EXPECT_EQ(parse_integer_in("-9223372036854775809", INT64_MIN, 0), std::nullopt);

  nibble_host host{};
  host.struct_size = sizeof host;
  host.abi_major = NIBBLE_ABI_MAJOR;
  host.abi_minor = NIBBLE_ABI_MINOR;
  host.log = &capture_log;
  std::optional<nibble::sdk::Host::Scope> scope;
  scope.emplace(&host, "test");
  g_log.clear();
  setenv("NIBBLE_TEST_SMALL_M", "12", 1);
  EXPECT_EQ(env_integer("NIBBLE_TEST_SMALL_M", 0, 4096), 12);
  EXPECT_TRUE(g_log.empty());
  for (const char* bad : {"4294967297", "-3", "7 rows", "\x1b[2J"}) {
    setenv("NIBBLE_TEST_SMALL_M", bad, 1);
    g_log.clear();
    EXPECT_EQ(env_integer("NIBBLE_TEST_SMALL_M", 0, 4096), std::nullopt) << bad;
    ASSERT_EQ(g_log.size(), 1u) << bad;
    EXPECT_THAT(g_log[0], HasSubstr("NIBBLE_TEST_SMALL_M"));
    EXPECT_THAT(g_log[0], HasSubstr("[0, 4096]"));
    EXPECT_EQ(g_log[0].find('\x1b'), std::string::npos);
  }
  unsetenv("NIBBLE_TEST_SMALL_M");
  g_log.clear();
  EXPECT_EQ(env_integer("NIBBLE_TEST_SMALL_M", 0, 4096), std::nullopt);
  EXPECT_TRUE(g_log.empty()) << "an unset variable is not a mistake";
  scope.reset();
  setenv("NIBBLE_TEST_SMALL_M", "-3", 1);
  g_log.clear();
  EXPECT_EQ(env_integer("NIBBLE_TEST_SMALL_M", 0, 4096), std::nullopt);
  EXPECT_TRUE(g_log.empty()) << "outside a host's scope, warnings have no host to go to";
  unsetenv("NIBBLE_TEST_SMALL_M");
}

}  // namespace
