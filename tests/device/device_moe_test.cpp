// An MoE block on a device through libnibble, on the mock device plugin: the router runs on the
// device's dense kernel, routing on the host, the experts on the device; the upstream fixture's
// routing and outputs are reproduced, and caller routing on the device matches a float64
// reference.
#include <nibble/error.hpp>
#include <nibble/safetensors.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "device_test_util.hpp"
#include "reference.hpp"

using ::testing::HasSubstr;
using namespace nibble;
using namespace nibble::test;

namespace {

const std::string kFixture = std::string(NIBBLE_FIXTURES_DIR) + "/moe_gptq_e8_top2";

Mat load(const TensorView& v) {
  Mat m(v.shape[0], v.shape.size() > 1 ? v.shape[1] : 1, to_dlpack(v.dtype));
  std::memcpy(m.words.data(), v.data, v.nbytes);
  return m;
}

std::vector<double> as_doubles(const TensorView& v) {
  std::vector<double> out(size_t(v.numel()));
  for (size_t i = 0; i < out.size(); ++i) out[i] = v.as_double(i);
  return out;
}

class DeviceMoe : public ::testing::Test {
 protected:
  Runtime rt{with_mock("mockdev")};
  Checkpoint ckpt = Checkpoint::open(kFixture);
  std::shared_ptr<const SafetensorsFile> io = SafetensorsFile::open(kFixture + "/io.safetensors");
};

TEST_F(DeviceMoe, RouterAndExpertsRunOnTheDevice) {
  MoeLayer moe = rt.moe(ckpt, "model.layers.0.mlp");
  const std::vector<Placement> p = moe.placements();
  EXPECT_EQ(p[0].part, "router");
  EXPECT_EQ(p[0].kernel, "mock_dense");
  EXPECT_EQ(p[1].kernel, "mock_moe");
  EXPECT_EQ(moe.device().device_type, kDLExtDev);
  EXPECT_TRUE(bool(moe.device_memory()));
}

TEST_F(DeviceMoe, ReproducesTheUpstreamRoutingAndOutputs) {
  for (bool renorm : {true, false}) {
    MoeOptions mo;
    mo.renormalize = renorm;
    MoeLayer moe = rt.moe(ckpt, "model.layers.0.mlp", mo);
    const sdk::host::Device device = moe.device_memory();
    for (const char* tag : {"", "bf16_"}) {
      for (int M : {1, 7, 33}) {
        const std::string sfx = std::string(tag) + "m" + std::to_string(M);
        const Mat x = load(io->tensor("x_" + sfx));
        sdk::host::StagedTensor x_on(device, x.t, nullptr);
        device.synchronize(nullptr);
        std::vector<int32_t> ids;
        std::vector<float> wts;
        moe.route(x_on.tensor(), ids, wts);
        const TensorView& want_ids = io->tensor("topk_ids_" + sfx);
        for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(ids[i], want_ids.i32(i)) << sfx;
        Mat y(M, 256, x.t.dtype);
        y.poison();
        MockStream stream;
        sdk::host::StagedTensor y_on(device, y.t, &stream);
        moe.forward(x_on.tensor(), y_on.tensor(), &stream);
        // The router and the experts were queued on the caller's stream.
        EXPECT_EQ(stream.forwards.load(), 2u) << sfx;
        y_on.download(y.t, &stream);
        device.synchronize(&stream);
        size_t bad = 0;
        const double err =
            rel_err(y, as_doubles(io->tensor((renorm ? "y_" : "y_norenorm_") + sfx)), &bad);
        EXPECT_EQ(bad, 0u) << sfx;
        // Two layers and the router compound: twice the experts' bound, as on the CPU.
        EXPECT_LE(err, 2 * declared_bound(rt, moe.placements()[1], x.t.dtype)) << sfx;
      }
    }
  }
}

TEST_F(DeviceMoe, CallerRoutingOnTheDeviceMatchesRoutingOnTheHost) {
  MoeLayer moe = rt.moe(ckpt, "model.layers.0.mlp");
  const sdk::host::Device device = moe.device_memory();
  const Mat x = random_mat(4, 256, sdk::dtype_f32(), 5);
  int32_t ids[8] = {3, -1, 3, 5, -1, -1, 3, 0};
  float w[8] = {0.5f, 0.5f, 1.0f, 0.25f, 1.f, 1.f, 0.75f, 0.25f};
  int64_t s[2] = {4, 2};
  DLTensor ti{ids, {kDLCPU, 0}, 2, sdk::dtype_i32(), s, nullptr, 0};
  DLTensor tw{w, {kDLCPU, 0}, 2, sdk::dtype_f32(), s, nullptr, 0};
  Mat y(4, 256, sdk::dtype_f32());
  y.poison();
  MockStream stream;
  sdk::host::StagedTensor x_on(device, x.t, &stream), y_on(device, y.t, &stream),
      ids_on(device, ti, &stream), w_on(device, tw, &stream);
  moe.forward_routed(x_on.tensor(), ids_on.tensor(), w_on.tensor(), y_on.tensor(), &stream);
  EXPECT_EQ(stream.forwards.load(), 1u);
  y_on.download(y.t, &stream);
  device.synchronize(&stream);
  // The float64 reference of the block's experts under the same routing.
  conformance::TestExperts ex;
  ex.K = 256;
  for (int e = 0; e < moe.num_experts(); ++e) {
    auto [w13, w2] = ckpt.decode_expert("model.layers.0.mlp", e);
    ex.I = w2.K;
    ex.w13.push_back(std::move(w13));
    ex.w2.push_back(std::move(w2));
  }
  const std::vector<double> want = conformance::reference_moe(
      ex, x.values(), 4, 2, std::vector<int32_t>(ids, ids + 8), std::vector<double>(w, w + 8));
  size_t bad = 0;
  const double err = rel_err(y, want, &bad);
  EXPECT_EQ(bad, 0u);
  EXPECT_LE(err, declared_bound(rt, moe.placements()[1], x.t.dtype));
  for (size_t k = 0; k < 256; ++k) EXPECT_EQ(y.get(2 * 256 + k), 0.0);  // row 2 routed nowhere
  // Host routing is refused for a block on the device.
  try {
    moe.forward_routed(x_on.tensor(), ti, w_on.tensor(), y_on.tensor());
    FAIL() << "host topk_ids accepted by a block on the device";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("topk_ids is on cpu, the layer runs on ext_dev:0"));
  }
}

TEST_F(DeviceMoe, AnIdOutOfRangeIsRefusedByTheDeviceKernel) {
  MoeLayer moe = rt.moe(ckpt, "model.layers.0.mlp");
  const sdk::host::Device device = moe.device_memory();
  const Mat x = random_mat(1, 256, sdk::dtype_f32(), 9);
  int32_t ids[2] = {1, 8};
  float w[2] = {0.5f, 0.5f};
  int64_t s[2] = {1, 2};
  DLTensor ti{ids, {kDLCPU, 0}, 2, sdk::dtype_i32(), s, nullptr, 0};
  DLTensor tw{w, {kDLCPU, 0}, 2, sdk::dtype_f32(), s, nullptr, 0};
  Mat y(1, 256, sdk::dtype_f32());
  sdk::host::StagedTensor x_on(device, x.t, nullptr), y_on(device, y.t, nullptr),
      ids_on(device, ti, nullptr), w_on(device, tw, nullptr);
  try {
    moe.forward_routed(x_on.tensor(), ids_on.tensor(), w_on.tensor(), y_on.tensor());
    FAIL() << "id 8 of 8 experts accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("topk_ids[0, 1] = 8"));
  }
}

}  // namespace
