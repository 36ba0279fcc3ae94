// The layer API end to end: checkpoint → decode → select → prepare → forward on every in-tree
// backend, against float64, with bad tensors rejected by name.
#include <nibble/error.hpp>
#include <nibble/runtime.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <thread>

#include "layer_test_util.hpp"

using ::testing::HasSubstr;
using namespace nibble;
using namespace nibble::test;

namespace {

// Synthetic checkpoints, made once: GPTQ v1 asym act-order, GPTQ v2 sym g64 8-bit, AWQ g128.
struct Ckpts {
  std::filesystem::path gptq_v1, gptq_v2_8bit, awq;
  static const Ckpts& get() {
    static Ckpts c = [] {
      Ckpts c;
      SyntheticSpec spec;
      spec.layers = {{256, 200}, {136, 64}};  // N=200 and K=136 are not multiples of 32
      spec.bias = true;
      spec.seed = 5;
      QuantizeOptions a;
      a.group_size = 32;
      a.sym = false;
      a.act_order = true;
      c.gptq_v1 = scratch("gptq_v1");
      write_checkpoint(c.gptq_v1, make_synthetic_model(spec, a, SchemeKind::GptqV1),
                       SchemeKind::GptqV1, a);
      QuantizeOptions b;
      b.bits = 8;
      b.group_size = 64;
      c.gptq_v2_8bit = scratch("gptq_v2_8bit");
      write_checkpoint(c.gptq_v2_8bit, make_synthetic_model(spec, b, SchemeKind::GptqV2),
                       SchemeKind::GptqV2, b);
      QuantizeOptions w;
      w.group_size = 128;
      w.sym = false;
      spec.layers = {{256, 200}, {384, 64}};
      c.awq = scratch("awq");
      write_checkpoint(c.awq, make_synthetic_model(spec, w, SchemeKind::AwqGemm),
                       SchemeKind::AwqGemm, w);
      return c;
    }();
    return c;
  }
};

struct Case {
  const char* backend;
  NumericMode mode;
};

class LinearOnBackend : public ::testing::TestWithParam<Case> {};

TEST_P(LinearOnBackend, MatchesFloat64WithinTheDeclaredBound) {
  const Case c = GetParam();
  Runtime rt(in_tree(c.backend, c.mode));
  ASSERT_NE(rt.registry().find(c.backend), nullptr);
  for (const auto& dir : {Ckpts::get().gptq_v1, Ckpts::get().gptq_v2_8bit, Ckpts::get().awq}) {
    auto ckpt = Checkpoint::open(dir);
    for (const auto& info : ckpt.linear_layers()) {
      LinearLayer layer;
      try {
        layer = rt.linear(ckpt, info.prefix);
      } catch (const Error& e) {
        // A backend may refuse a layer, but must say why.
        EXPECT_THAT(e.what(), HasSubstr(info.prefix));
        continue;
      }
      EXPECT_EQ(layer.placement().backend, c.backend);
      auto w = ckpt.decode_linear(info.prefix);
      for (DLDataType dt : {sdk::dtype_f32(), sdk::dtype_bf16(), sdk::dtype_f16()}) {
        for (int64_t M : {1, 7, 33}) {
          Mat x = random_mat(M, info.K, dt, uint32_t(M));
          Mat y(M, info.N, dt);
          y.poison();
          layer.forward(x.t, y.t);
          size_t bad = 0;
          double err = rel_err(y, linear_ref(w, x), &bad);
          EXPECT_EQ(bad, 0u) << info.prefix << " M=" << M;
          EXPECT_LE(err, declared_bound(rt, layer.placement(), dt))
              << dir << " " << info.prefix << " " << sdk::dtype_name(dt) << " M=" << M;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Backends, LinearOnBackend,
    ::testing::Values(Case{"npu_ref", NumericMode::W4A16}, Case{"gpu_ref", NumericMode::W4A16},
                      Case{"cpu_amx", NumericMode::W4A16}, Case{"cpu_amx", NumericMode::W4A8}),
    [](const auto& info) {
      return std::string(info.param.backend) + "_" + mode_name(info.param.mode);
    });

class LayerErrors : public ::testing::Test {
 protected:
  Runtime rt{in_tree("npu_ref")};
  Checkpoint ckpt = Checkpoint::open(Ckpts::get().gptq_v1);
  LinearLayer layer = rt.linear(ckpt, "model.layers.0.linear");
  std::string error_of(const DLTensor& x, DLTensor& y) {
    try {
      layer.forward(x, y);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
};

TEST_F(LayerErrors, WrongDtypeIsNamed) {
  Mat x(2, 256, DLDataType{kDLInt, 32, 1}), y(2, 200, DLDataType{kDLInt, 32, 1});
  std::string e = error_of(x.t, y.t);
  EXPECT_THAT(e, HasSubstr("model.layers.0.linear"));
  EXPECT_THAT(e, HasSubstr("dtype i32"));
}

TEST_F(LayerErrors, WrongKIsNamed) {
  Mat x(2, 255, sdk::dtype_f32()), y(2, 200, sdk::dtype_f32());
  EXPECT_THAT(error_of(x.t, y.t), HasSubstr("255 columns; the layer expects 256"));
}

TEST_F(LayerErrors, MismatchedOutputIsNamed) {
  Mat x(2, 256, sdk::dtype_f32()), y(3, 200, sdk::dtype_f32()), z(2, 200, sdk::dtype_bf16());
  EXPECT_THAT(error_of(x.t, y.t), HasSubstr("3 rows"));
  EXPECT_THAT(error_of(x.t, z.t), HasSubstr("must match"));
}

TEST_F(LayerErrors, ZeroRowsDoNothing) {
  Mat x(0, 256, sdk::dtype_f32()), y(0, 200, sdk::dtype_f32());
  EXPECT_EQ(error_of(x.t, y.t), "");
}

TEST_F(LayerErrors, NaNPropagatesToItsRowOnly) {
  Mat x = random_mat(3, 256, sdk::dtype_f32(), 1);
  x.set(256 + 5, std::nanf(""));
  Mat y(3, 200, sdk::dtype_f32());
  EXPECT_EQ(error_of(x.t, y.t), "");
  for (int64_t n = 0; n < 200; ++n) {
    EXPECT_TRUE(std::isfinite(y.get(size_t(n))));
    EXPECT_TRUE(std::isnan(y.get(size_t(200 + n))));
    EXPECT_TRUE(std::isfinite(y.get(size_t(400 + n))));
  }
}

TEST_F(LayerErrors, AnUnknownLayerListsTheLayers) {
  try {
    rt.linear(ckpt, "model.layers.9.linear");
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("no linear layer 'model.layers.9.linear'"));
    EXPECT_THAT(e.what(), HasSubstr("model.layers.0.linear"));
  }
}

TEST(Runtime, ConcurrentForwardOnOneLayerGivesTheSameResult) {
  Runtime rt(in_tree("auto"));
  auto ckpt = Checkpoint::open(Ckpts::get().awq);
  auto layer = rt.linear(ckpt, "model.layers.0.linear");
  Mat x = random_mat(9, 256, sdk::dtype_bf16(), 3);
  Mat want(9, 200, sdk::dtype_bf16());
  layer.forward(x.t, want.t);
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 20; ++i) {
        Mat y(9, 200, sdk::dtype_bf16());
        layer.forward(x.t, y.t);
        if (y.words != want.words) ++mismatches;
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(mismatches.load(), 0);
}

TEST(Runtime, AutoPrefersTheHighestPriorityBackend) {
  Runtime rt(in_tree("auto"));
  auto ckpt = Checkpoint::open(Ckpts::get().gptq_v2_8bit);
  auto layer = rt.linear(ckpt, "model.layers.0.linear");
  EXPECT_EQ(layer.placement().backend, "cpu_amx");
  EXPECT_FALSE(layer.placement().alternatives.empty());
  EXPECT_GT(layer.prepared_bytes(), 0u);
}

// A plugin's load per registry ends (shutdown2) when its Runtime and the layers made from it are
// all gone: a layer keeps its load past its Runtime, and nothing keeps it after both.
TEST(Runtime, ALoadEndsWithTheLastRuntimeOrLayerThatHoldsIt) {
  RuntimeOptions o;
  o.use_default_plugin_dir = false;
  o.plugin_dirs = {std::string(NIBBLE_BUILD_DIR) + "/tests/plugins/loadcount"};
  o.backend = "loadcount";
  // The probe of a new Runtime's load counts the loads alive, its own included.
  auto live_loads = [&] { return Runtime(o).registry().find("loadcount")->probe_detail; };
  EXPECT_EQ(live_loads(), "live loads: 1");
  LinearLayer layer;
  {
    Runtime rt(o);
    EXPECT_EQ(rt.registry().find("loadcount")->probe_detail, "live loads: 1");
    layer = rt.linear(Checkpoint::open(Ckpts::get().gptq_v1), "model.layers.1.linear");
  }
  EXPECT_EQ(live_loads(), "live loads: 2");  // the layer's, and the probing Runtime's
  Mat x = random_mat(2, 136, sdk::dtype_f32(), 4);
  Mat y(2, 64, sdk::dtype_f32());
  y.poison();
  layer.forward(x.t, y.t);  // still usable: its load has not ended
  EXPECT_LE(
      rel_err(
          y, linear_ref(
                 Checkpoint::open(Ckpts::get().gptq_v1).decode_linear("model.layers.1.linear"), x)),
      1e-6);
  layer = LinearLayer();
  EXPECT_EQ(live_loads(), "live loads: 1");
}

TEST(Runtime, APluginOfAnOlderMinorRunsWithDefaults) {
  for (const char* name : {"older", "older11", "older12"}) {
    RuntimeOptions o;
    o.use_default_plugin_dir = false;
    o.plugin_dirs = {std::string(NIBBLE_BUILD_DIR) + "/tests/plugins/" + name};
    o.backend = name;
    Runtime rt(o);
    EXPECT_EQ(rt.device().device_type, kDLCPU) << name;
    auto ckpt = Checkpoint::open(Ckpts::get().gptq_v1);
    auto layer = rt.linear(ckpt, "model.layers.1.linear");
    EXPECT_EQ(layer.device().device_type, kDLCPU);
    // 1.0 has no prepared_bytes: the default, 0; the later minors report the weight.
    if (std::string(name) == "older")
      EXPECT_EQ(layer.prepared_bytes(), 0u);
    else
      EXPECT_GT(layer.prepared_bytes(), 0u) << name;
    Mat x = random_mat(2, 136, sdk::dtype_f32(), 4);
    Mat y(2, 64, sdk::dtype_f32());
    y.poison();
    layer.forward(x.t, y.t);
    size_t bad = 0;
    EXPECT_LE(rel_err(y, linear_ref(ckpt.decode_linear("model.layers.1.linear"), x), &bad), 1e-6)
        << name;
    EXPECT_EQ(bad, 0u);
    // Asked for a device, the older plugin is passed over with the reason.
    o.device = "cuda";
    Runtime on_device(o);
    try {
      on_device.linear(ckpt, "model.layers.1.linear");
      ADD_FAILURE() << name << " took a layer on cuda";
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr(std::string(name) + "/scalar: runs on cpu, the layer is on "
                                                          "cuda:0"));
    }
  }
}

}  // namespace
