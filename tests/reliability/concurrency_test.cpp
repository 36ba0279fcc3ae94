// Many threads call forward on shared prepared layers (linear and MoE) on every backend while
// other threads create and release layers; every result equals the single-threaded one.
#include <nibble/error.hpp>
#include <nibble/quantize.hpp>
#include <nibble/runtime.hpp>
#include <nibble/sdk/numeric.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>

#include <unistd.h>
#include <random>
#include <thread>

namespace fs = std::filesystem;
using namespace nibble;

namespace {

const fs::path& checkpoint() {
  static fs::path dir = [] {
    fs::path d = fs::path(NIBBLE_BUILD_DIR) / "tests" /
                 // ctest runs each test case in its own process, several at once: one
                 // directory per process, so none reads a checkpoint another is writing.
                 ("concurrency_ckpt_" + std::to_string(getpid()));
    SyntheticSpec spec;
    spec.layers = {{256, 192}};
    spec.moe = SyntheticMoe{8, 128, 96, 2};
    spec.seed = 21;
    QuantizeOptions o;
    o.group_size = 64;
    o.sym = false;
    write_checkpoint(d, make_synthetic_model(spec, o, SchemeKind::AwqGemm), SchemeKind::AwqGemm, o);
    return d;
  }();
  return dir;
}

struct Buf {
  std::vector<uint16_t> data;
  int64_t shape[2];
  DLTensor t{};
  Buf(int64_t M, int64_t K) : data(size_t(M * K)), shape{M, K} {
    t = DLTensor{data.data(), {kDLCPU, 0}, 2, sdk::dtype_bf16(), shape, nullptr, 0};
  }
};

Buf random_input(int64_t M, int64_t K, uint32_t seed) {
  Buf b(M, K);
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  for (auto& v : b.data) v = sdk::f32_to_bf16(nd(rng));
  return b;
}

class Concurrency : public ::testing::TestWithParam<const char*> {};

TEST_P(Concurrency, SharedLayersGiveSingleThreadedResultsWhileOthersComeAndGo) {
  RuntimeOptions o;
  o.use_default_plugin_dir = false;
  o.plugin_dirs = {NIBBLE_PLUGIN_BUILD_DIR};
  o.backend = GetParam();
  o.threads = 1;
  Runtime rt(o);
  auto ckpt = Checkpoint::open(checkpoint());
  auto linear = rt.linear(ckpt, "model.layers.0.linear");
  bool has_moe = true;
  MoeLayer moe;
  try {
    moe = rt.moe(ckpt, ckpt.moe_blocks()[0].prefix);
  } catch (const Error&) {
    has_moe = false;  // this backend has no MoE kernel (yet): linear only
  }
  Buf x = random_input(5, 256, 1), mx = random_input(6, 128, 2);
  Buf want(5, 192), mwant(6, 128);
  linear.forward(x.t, want.t);
  if (has_moe) moe.forward(mx.t, mwant.t);

  std::atomic<int> mismatches{0}, errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 25; ++i) {
        Buf y(5, 192), my(6, 128);
        try {
          linear.forward(x.t, y.t);
          if (y.data != want.data) ++mismatches;
          if (has_moe) {
            moe.forward(mx.t, my.t);
            if (my.data != mwant.data) ++mismatches;
          }
        } catch (const std::exception&) {
          ++errors;
        }
      }
    });
  // Layers created and released meanwhile, on the same runtime.
  threads.emplace_back([&] {
    for (int i = 0; i < 6; ++i) {
      try {
        auto l = rt.linear(ckpt, "model.layers.0.linear");
        Buf y(5, 192);
        l.forward(x.t, y.t);
        if (y.data != want.data) ++mismatches;
      } catch (const std::exception&) {
        ++errors;
      }
    }
  });
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(mismatches.load(), 0);
}

INSTANTIATE_TEST_SUITE_P(Backends, Concurrency, ::testing::Values("cpu_amx", "npu_ref", "gpu_ref"));

}  // namespace
