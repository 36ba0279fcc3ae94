// A plugin that fails, throws, returns NULL or lies about sizes at every entry point: the host
// reports each with the plugin's name and the call, leaves nothing half-built, and keeps serving
// other layers and backends.
#include <nibble/error.hpp>
#include <nibble/quantize.hpp>
#include <nibble/runtime.hpp>
#include <nibble/sdk/numeric.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include <unistd.h>

#include "error_text.hpp"

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using namespace nibble;

namespace {

using nibble::test::error_text;

const std::string kFaultyDir = std::string(NIBBLE_BUILD_DIR) + "/tests/plugins/faulty";

struct FaultEnv {
  explicit FaultEnv(const char* faults) { setenv("NIBBLE_FAULT", faults, 1); }
  ~FaultEnv() { unsetenv("NIBBLE_FAULT"); }
};

const fs::path& checkpoint() {
  static fs::path dir = [] {
    fs::path d = fs::path(NIBBLE_BUILD_DIR) / "tests" /
                 // ctest runs each test case in its own process, several at once: one
                 // directory per process, so none reads a checkpoint another is writing.
                 ("fault_ckpt_" + std::to_string(getpid()));
    SyntheticSpec spec;
    spec.layers = {{128, 64}, {64, 32}};
    spec.seed = 11;
    QuantizeOptions o;
    o.group_size = 32;
    write_checkpoint(d, make_synthetic_model(spec, o, SchemeKind::GptqV2), SchemeKind::GptqV2, o);
    return d;
  }();
  return dir;
}

RuntimeOptions options(const std::string& backend, std::vector<std::string> dirs = {kFaultyDir}) {
  RuntimeOptions o;
  o.use_default_plugin_dir = false;
  o.plugin_dirs = std::move(dirs);
  o.plugin_dirs.push_back(NIBBLE_PLUGIN_BUILD_DIR);
  o.backend = backend;
  o.allowed_plugins = {"faulty", "npu_ref"};
  return o;
}

// A private copy of the faulty plugin: entry results are cached per file, so entry faults need
// a file of their own.
std::string fresh_copy(const std::string& tag) {
  fs::path d = fs::path(NIBBLE_BUILD_DIR) / "tests" / "faulty_copies" / tag;
  fs::create_directories(d);
  fs::copy_file(kFaultyDir + "/libnibble_faulty.so", d / "libnibble_faulty.so",
                fs::copy_options::overwrite_existing);
  return d.string();
}

struct Io {
  std::vector<float> xb, yb;
  int64_t xs[2], ys[2];
  DLTensor x{}, y{};
  Io(int64_t M, int64_t K, int64_t N)
      : xb(size_t(M * K), 0.5f), yb(size_t(M * N)), xs{M, K}, ys{M, N} {
    x = DLTensor{xb.data(), {kDLCPU, 0}, 2, sdk::dtype_f32(), xs, nullptr, 0};
    y = DLTensor{yb.data(), {kDLCPU, 0}, 2, sdk::dtype_f32(), ys, nullptr, 0};
  }
};

TEST(FaultInjection, EntryFailuresAreReportedAndOthersLoad) {
  for (const char* f : {"entry:fail", "entry:throw", "size:small"}) {
    FaultEnv env(f);
    Runtime rt(options("auto", {fresh_copy(f)}));
    EXPECT_EQ(rt.registry().find("faulty"), nullptr) << f;
    EXPECT_NE(rt.registry().find("npu_ref"), nullptr) << f;
    bool reported = false;
    for (const auto& r : rt.registry().reports())
      if (r.path.find(std::string(f)) != std::string::npos) {
        reported = true;
        EXPECT_FALSE(r.ok);
        EXPECT_FALSE(r.message.empty());
        if (std::string(f) == "entry:fail") {
          EXPECT_THAT(r.message, HasSubstr("injected entry failure"));
        }
        if (std::string(f) == "entry:throw") {
          EXPECT_THAT(r.message, HasSubstr("threw a C++ exception"));
        }
        if (std::string(f) == "size:small") {
          EXPECT_THAT(r.message, HasSubstr("smaller than ABI 1.0"));
        }
      }
    EXPECT_TRUE(reported) << f;
  }
}

TEST(FaultInjection, ProbeFailuresMakeTheBackendUnavailable) {
  for (const char* f : {"probe:fail", "probe:throw"}) {
    FaultEnv env(f);
    Runtime rt(options("faulty"));
    const BackendInfo* b = rt.registry().find("faulty");
    ASSERT_NE(b, nullptr);
    EXPECT_FALSE(b->available) << f;
    EXPECT_FALSE(b->probe_detail.empty());
    auto ckpt = Checkpoint::open(checkpoint());
    EXPECT_THAT(error_text([&] { rt.linear(ckpt, "model.layers.0.linear"); }),
                HasSubstr("faulty is unavailable"));
  }
}

TEST(FaultInjection, ACanImplementThatThrowsFallsBackToTheNextBackend) {
  FaultEnv env("can_implement:throw");
  Runtime rt(options("faulty,npu_ref"));
  auto ckpt = Checkpoint::open(checkpoint());
  auto layer = rt.linear(ckpt, "model.layers.0.linear");
  EXPECT_EQ(layer.placement().backend, "npu_ref");
  ASSERT_FALSE(layer.placement().passed_over.empty());
  EXPECT_THAT(layer.placement().passed_over[0], HasSubstr("faulty/linear"));
  EXPECT_THAT(layer.placement().passed_over[0], HasSubstr("threw"));
}

TEST(FaultInjection, PrepareFaultsNameThePluginAndLeaveNothingBehind) {
  auto ckpt = Checkpoint::open(checkpoint());
  for (const char* f :
       {"prepare:fail", "prepare:throw", "prepare:null", "prepare:fail_with_handle"}) {
    Runtime rt(options("faulty"));
    {
      FaultEnv env(f);
      std::string e = error_text([&] { rt.linear(ckpt, "model.layers.0.linear"); });
      EXPECT_THAT(e, HasSubstr("faulty/linear")) << f;
      EXPECT_THAT(e, HasSubstr("prepare")) << f;
      EXPECT_THAT(e, HasSubstr("model.layers.0.linear")) << f;
    }
    // The plugin keeps serving, and no handle of the failed prepare is still alive: this
    // plugin's prepared_bytes reports the number of live handles.
    auto layer = rt.linear(ckpt, "model.layers.1.linear");
    EXPECT_EQ(layer.prepared_bytes(), 1u) << f;
  }
}

TEST(FaultInjection, APrepareThatAnswersUnsupportedFallsBackToTheNextCandidate) {
  FaultEnv env("prepare:unsupported");
  auto ckpt = Checkpoint::open(checkpoint());
  Runtime rt(options("faulty,npu_ref"));
  auto layer = rt.linear(ckpt, "model.layers.0.linear");
  EXPECT_EQ(layer.placement().backend, "npu_ref");
  ASSERT_FALSE(layer.placement().passed_over.empty());
  EXPECT_THAT(layer.placement().passed_over.back(), HasSubstr("faulty/linear refused at prepare"));
  EXPECT_THAT(layer.placement().passed_over.back(), HasSubstr("do not fit my layout"));
  Runtime strict(options("faulty"));
  EXPECT_THAT(error_text([&] { strict.linear(ckpt, "model.layers.0.linear"); }),
              HasSubstr("every kernel that accepted the layer refused its weight"));
}

TEST(FaultInjection, ForwardFaultsNameThePluginAndTheLayerStaysUsable) {
  auto ckpt = Checkpoint::open(checkpoint());
  Runtime rt(options("faulty"));
  auto layer = rt.linear(ckpt, "model.layers.0.linear");
  Io io(2, 128, 64);
  for (const char* f : {"forward:fail", "forward:throw", "workspace:fail", "workspace:huge"}) {
    FaultEnv env(f);
    std::string e = error_text([&] { layer.forward(io.x, io.y); });
    EXPECT_THAT(e, HasSubstr("faulty/linear")) << f;
    EXPECT_THAT(e, HasSubstr("model.layers.0.linear")) << f;
  }
  EXPECT_EQ(error_text([&] { layer.forward(io.x, io.y); }), "");
  // Another backend keeps serving the same checkpoint throughout.
  Runtime other(options("npu_ref"));
  auto ok = other.linear(ckpt, "model.layers.0.linear");
  EXPECT_EQ(error_text([&] { ok.forward(io.x, io.y); }), "");
}

}  // namespace
