// MoE blocks through the runtime: the upstream-packed fixture (router, top-k, renormalisation)
// on every backend with a MoE kernel, routing given by the caller, and bad routing.
#include <nibble/error.hpp>
#include <nibble/runtime.hpp>
#include <nibble/safetensors.hpp>

#include <algorithm>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "layer_test_util.hpp"

using ::testing::HasSubstr;
using namespace nibble;
using namespace nibble::test;

namespace {

const std::string kFixture = std::string(NIBBLE_FIXTURES_DIR) + "/moe_gptq_e8_top2";

Mat load(const TensorView& v) {
  DLDataType dt = to_dlpack(v.dtype);
  Mat m(v.shape[0], v.shape.size() > 1 ? v.shape[1] : 1, dt);
  std::memcpy(m.words.data(), v.data, v.nbytes);
  return m;
}

std::vector<double> as_doubles(const TensorView& v) {
  std::vector<double> out(size_t(v.numel()));
  for (size_t i = 0; i < out.size(); ++i) out[i] = v.as_double(i);
  return out;
}

class MoeFixture : public ::testing::TestWithParam<const char*> {};

TEST_P(MoeFixture, ReproducesTheUpstreamExpectedOutputs) {
  Runtime rt(in_tree(GetParam()));
  if (!has_moe_kernel(rt, GetParam())) GTEST_SKIP() << GetParam() << " has no MoE kernel yet";
  auto ckpt = Checkpoint::open(kFixture);
  auto io = SafetensorsFile::open(kFixture + "/io.safetensors");
  for (bool renorm : {true, false}) {
    MoeOptions mo;
    mo.renormalize = renorm;
    auto moe = rt.moe(ckpt, "model.layers.0.mlp", mo);
    EXPECT_EQ(moe.top_k(), 2);
    EXPECT_EQ(moe.placements()[1].backend, GetParam());
    for (const char* tag : {"", "bf16_"}) {
      for (int M : {1, 7, 33}) {
        std::string sfx = std::string(tag) + "m" + std::to_string(M);
        Mat x = load(io->tensor("x_" + sfx));
        std::vector<int32_t> ids;
        std::vector<float> wts;
        moe.route(x.t, ids, wts);
        const TensorView& want_ids = io->tensor("topk_ids_" + sfx);
        for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(ids[i], want_ids.i32(i)) << sfx;
        const TensorView& want_w =
            io->tensor((renorm ? "topk_weights_" : "topk_weights_norenorm_") + sfx);
        // The router runs on the backend's dense kernel: its weights are as exact as that
        // kernel's declared bound (cpu_amx's oneDNN kernel computes in bf16).
        const double router_bound = declared_bound(rt, moe.placements()[0], sdk::dtype_f32());
        for (size_t i = 0; i < wts.size(); ++i)
          EXPECT_NEAR(wts[i], want_w.as_double(i), std::max(1e-5, 2 * router_bound)) << sfx;
        Mat y(M, 256, x.t.dtype);
        y.poison();
        moe.forward(x.t, y.t);
        size_t bad = 0;
        double err =
            rel_err(y, as_doubles(io->tensor((renorm ? "y_" : "y_norenorm_") + sfx)), &bad);
        EXPECT_EQ(bad, 0u);
        EXPECT_LE(err, 2 * declared_bound(rt, moe.placements()[1], x.t.dtype)) << sfx;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, MoeFixture, ::testing::Values("npu_ref", "gpu_ref", "cpu_amx"));

class MoeRouting : public ::testing::Test {
 protected:
  Runtime rt{in_tree("npu_ref")};
  Checkpoint ckpt = Checkpoint::open(kFixture);
  MoeLayer moe = rt.moe(ckpt, "model.layers.0.mlp");
};

TEST_F(MoeRouting, CallerRoutingWithEmptySlotsAndIdleExperts) {
  Mat x = random_mat(4, 256, sdk::dtype_f32(), 9);
  int32_t ids[8] = {3, -1, 3, 5, -1, -1, 3, 0};  // experts 1, 2, 4, 6, 7 get no token
  float w[8] = {0.5f, 0.5f, 1.0f, 0.25f, 1.f, 1.f, 0.75f, 0.25f};
  int64_t s[2] = {4, 2};
  DLTensor ti{ids, {kDLCPU, 0}, 2, sdk::dtype_i32(), s, nullptr, 0};
  DLTensor tw{w, {kDLCPU, 0}, 2, sdk::dtype_f32(), s, nullptr, 0};
  Mat y(4, 256, sdk::dtype_f32());
  y.poison();
  moe.forward_routed(x.t, ti, tw, y.t);
  for (size_t k = 0; k < 256; ++k) EXPECT_EQ(y.get(2 * 256 + k), 0.0);  // row 2 routed nowhere
  for (size_t i = 0; i < y.size(); ++i) EXPECT_TRUE(std::isfinite(y.get(i)));
  // Row 1: expert 3 with weight 1 equals row 0's expert 3 contribution scaled by 2 only when
  // x rows are equal; instead check linearity in the routing weight on the same row.
  float w2[8] = {1.0f, 0.5f, 1.0f, 0.25f, 1.f, 1.f, 0.75f, 0.25f};
  DLTensor tw2{w2, {kDLCPU, 0}, 2, sdk::dtype_f32(), s, nullptr, 0};
  Mat y2(4, 256, sdk::dtype_f32());
  moe.forward_routed(x.t, ti, tw2, y2.t);
  for (size_t k = 0; k < 256; ++k)
    EXPECT_NEAR(y2.get(k), 2 * y.get(k), 1e-5 * (1 + std::fabs(y.get(k))));
}

TEST_F(MoeRouting, AnIdOutOfRangeIsRefused) {
  Mat x = random_mat(1, 256, sdk::dtype_f32(), 9);
  int32_t ids[2] = {1, 8};
  float w[2] = {0.5f, 0.5f};
  int64_t s[2] = {1, 2};
  DLTensor ti{ids, {kDLCPU, 0}, 2, sdk::dtype_i32(), s, nullptr, 0};
  DLTensor tw{w, {kDLCPU, 0}, 2, sdk::dtype_f32(), s, nullptr, 0};
  Mat y(1, 256, sdk::dtype_f32());
  try {
    moe.forward_routed(x.t, ti, tw, y.t);
    FAIL() << "id 8 of 8 experts accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("topk_ids[0, 1] = 8"));
  }
}

// The experts' descriptor is built from the checkpoint's layer facts without decoding; whatever
// it promises (scales dtype, bits, symmetry, a largest zero point) every decoded expert keeps.
TEST_F(MoeRouting, TheExpertsDescriptorAgreesWithEveryDecodedExpert) {
  const std::vector<MoeInfo> blocks = ckpt.moe_blocks();
  ASSERT_FALSE(blocks.empty());
  const MoeInfo& info = blocks[0];
  const nibble_layer_desc d = rt.describe_experts(info, 2, info.prefix.c_str());
  EXPECT_EQ(d.op, NIBBLE_OP_MOE);
  EXPECT_EQ(d.K, info.hidden);
  EXPECT_EQ(d.N, info.intermediate);
  EXPECT_EQ(d.top_k, 2);
  bool sym13 = true, sym2 = true;
  int max13 = 0, max2 = 0;
  for (int e = 0; e < info.num_experts; ++e) {
    const auto [w13, w2] = ckpt.decode_expert(info.prefix, e);
    EXPECT_TRUE(sdk::same_dtype(w13.scales_dtype, d.weight_dtype)) << "expert " << e;
    EXPECT_EQ(w13.bits, d.bits) << "expert " << e;
    EXPECT_EQ(w13.group_size, d.group_size) << "expert " << e;
    EXPECT_EQ(w2.group_size, d.w2_group_size) << "expert " << e;
    sym13 = sym13 && w13.symmetric();
    sym2 = sym2 && w2.symmetric();
    max13 = std::max(max13, int(*std::max_element(w13.zeros.begin(), w13.zeros.end())));
    max2 = std::max(max2, int(*std::max_element(w2.zeros.begin(), w2.zeros.end())));
  }
  EXPECT_EQ(d.symmetric != 0, sym13);
  EXPECT_EQ(d.w2_symmetric != 0, sym2);
  if (d.max_zero != 0) {
    EXPECT_EQ(d.max_zero, max13);
  }
  if (d.w2_max_zero != 0) {
    EXPECT_EQ(d.w2_max_zero, max2);
  }
}

TEST_F(MoeRouting, TopKBeyondTheExpertsIsRefused) {
  MoeOptions mo;
  mo.top_k = 9;
  EXPECT_THROW(rt.moe(ckpt, "model.layers.0.mlp", mo), Error);
}

TEST_F(MoeRouting, AnUnknownBlockListsTheBlocks) {
  try {
    rt.moe(ckpt, "model.layers.1.mlp");
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("model.layers.0.mlp"));
  }
}

}  // namespace
