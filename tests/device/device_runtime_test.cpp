// Linear layers on a device through libnibble, on the mock device plugin: which kernels a layer
// on a device (or on the CPU) is given and why the others are passed over, that x and y must be
// on the layer's device (both directions), that the host really hands the kernel device memory,
// that the stream reaches the kernel, and that results match a float64 reference.
#include <nibble/error.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "device_test_util.hpp"

using ::testing::HasSubstr;
using namespace nibble;
using namespace nibble::test;

namespace {

bool same(const DLDevice& a, const DLDevice& b) {
  return a.device_type == b.device_type && a.device_id == b.device_id;
}

bool mentions(const std::vector<std::string>& lines, const std::string& text) {
  return std::any_of(lines.begin(), lines.end(),
                     [&](const std::string& l) { return l.find(text) != std::string::npos; });
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

const char* kLayer = "model.layers.0.linear";

TEST(DeviceSelection, ADeviceBackendNamedAloneImpliesItsDevice) {
  Runtime rt(with_mock("mockdev"));
  EXPECT_TRUE(same(rt.device(), {kDLExtDev, 0}));
  const BackendInfo* b = rt.registry().find("mockdev");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->device_count, 2);
  auto layer = rt.linear(Checkpoint::open(synthetic_checkpoint()), kLayer);
  EXPECT_EQ(layer.placement().kernel, "mock_linear");
  EXPECT_TRUE(same(layer.device(), {kDLExtDev, 0}));
  EXPECT_TRUE(bool(layer.device_memory()));
  EXPECT_TRUE(layer.placement().passed_over.empty());
}

TEST(DeviceSelection, AutoStaysOnTheCpuAndNeverPicksADeviceKernel) {
  Runtime rt(with_mock("auto"));
  EXPECT_TRUE(same(rt.device(), {kDLCPU, 0}));
  auto layer = rt.linear(Checkpoint::open(synthetic_checkpoint()), kLayer);
  EXPECT_NE(layer.placement().kernel, "mock_linear");
  EXPECT_TRUE(same(layer.device(), {kDLCPU, 0}));
  EXPECT_FALSE(bool(layer.device_memory()));
  EXPECT_TRUE(mentions(layer.placement().alternatives,
                       "mockdev/mock_linear: runs on ext_dev, the layer is on cpu"));
}

TEST(DeviceSelection, AutoOnADeviceTakesOnlyThatDevicesKernels) {
  Runtime rt(with_mock("auto", "ext_dev:1"));
  auto layer = rt.linear(Checkpoint::open(synthetic_checkpoint()), kLayer);
  EXPECT_EQ(layer.placement().backend, "mockdev");
  EXPECT_EQ(layer.placement().kernel, "mock_linear");
  EXPECT_TRUE(same(layer.device(), {kDLExtDev, 1}));
  EXPECT_TRUE(mentions(layer.placement().alternatives,
                       "npu_ref/linear_antiquant: runs on cpu, the layer is on ext_dev:1"));
}

TEST(DeviceSelection, ANamedBackendsKernelOfAnotherDeviceIsPassedOverWithTheReason) {
  Runtime rt(with_mock("mockdev", "cpu"));
  auto layer = rt.linear(Checkpoint::open(synthetic_checkpoint()), kLayer);
  EXPECT_EQ(layer.placement().kernel, "host_linear");
  EXPECT_TRUE(same(layer.device(), {kDLCPU, 0}));
  EXPECT_TRUE(mentions(layer.placement().passed_over,
                       "mockdev/mock_linear: runs on ext_dev, the layer is on cpu"))
      << ::testing::PrintToString(layer.placement().passed_over);
}

TEST(DeviceSelection, ACpuBackendAskedForADeviceSaysWhyNothingFits) {
  Runtime rt(with_mock("npu_ref", "ext_dev"));
  const std::string e =
      error_of([&] { rt.linear(Checkpoint::open(synthetic_checkpoint()), kLayer); });
  EXPECT_THAT(e, HasSubstr("on ext_dev:0"));
  EXPECT_THAT(e, HasSubstr("npu_ref/linear_antiquant: runs on cpu, the layer is on ext_dev:0"));
}

TEST(DeviceSelection, ADeviceIndexTheBackendDoesNotHaveIsRefused) {
  Runtime rt(with_mock("mockdev", "ext_dev:5"));
  const std::string e =
      error_of([&] { rt.linear(Checkpoint::open(synthetic_checkpoint()), kLayer); });
  EXPECT_THAT(e, HasSubstr("mockdev/mock_linear: the backend finds 2 ext_dev devices, the layer "
                           "is on ext_dev:5"));
}

TEST(DeviceSelection, ABackendThatFindsNoDeviceLeavesLayersOnTheCpu) {
  setenv("NIBBLE_MOCKDEV_DEVICES", "0", 1);
  RuntimeOptions o = with_mock("mockdev");
  Runtime rt(o);
  unsetenv("NIBBLE_MOCKDEV_DEVICES");
  EXPECT_TRUE(same(rt.device(), {kDLCPU, 0}));
  const std::string e =
      error_of([&] { rt.linear(Checkpoint::open(synthetic_checkpoint()), kLayer); });
  EXPECT_THAT(e, HasSubstr("backend mockdev is unavailable here: no mock device"));
}

// A layer on device 0 of the mock and the decoded weight it was built from.
class DeviceLinear : public ::testing::Test {
 protected:
  Runtime rt{with_mock("mockdev")};
  Checkpoint ckpt = Checkpoint::open(synthetic_checkpoint());
  LinearLayer layer = rt.linear(ckpt, kLayer);
  CanonicalWeight w = ckpt.decode_linear(kLayer);
};

TEST_F(DeviceLinear, MatchesFloat64OnDeviceTensorsAndTheStreamReachesTheKernel) {
  const sdk::host::Device device = layer.device_memory();
  for (DLDataType dt : {sdk::dtype_f32(), sdk::dtype_bf16(), sdk::dtype_f16()}) {
    for (int64_t M : {1, 7, 33}) {
      const Mat x = random_mat(M, w.K, dt, uint32_t(M) + 3);
      Mat y(M, w.N, dt);
      y.poison();
      MockStream stream;
      sdk::host::StagedTensor x_on(device, x.t, &stream), y_on(device, y.t, &stream);
      layer.forward(x_on.tensor(), y_on.tensor(), &stream);
      y_on.download(y.t, &stream);
      device.synchronize(&stream);
      EXPECT_EQ(stream.forwards.load(), 1u);
      EXPECT_EQ(stream.copies.load(), 3u);  // x and y in, y out
      EXPECT_EQ(stream.synchronizes.load(), 1u);
      size_t bad = 0;
      const double err = rel_err(y, linear_ref(w, x), &bad);
      EXPECT_EQ(bad, 0u) << sdk::dtype_name(dt) << " M=" << M;
      EXPECT_LE(err, declared_bound(rt, layer.placement(), dt))
          << sdk::dtype_name(dt) << " M=" << M;
    }
  }
}

TEST_F(DeviceLinear, HostTensorsAreRefusedNamingBothDevices) {
  Mat x = random_mat(2, w.K, sdk::dtype_f32(), 1);
  Mat y(2, w.N, sdk::dtype_f32());
  EXPECT_THAT(error_of([&] { layer.forward(x.t, y.t); }),
              HasSubstr("layer " + std::string(kLayer) +
                        ": input x is on cpu, the layer runs on ext_dev:0: copy it there first"));
  // x on the device, y left behind.
  sdk::host::StagedTensor x_on(layer.device_memory(), x.t, nullptr);
  EXPECT_THAT(error_of([&] { layer.forward(x_on.tensor(), y.t); }),
              HasSubstr("output y is on cpu, the layer runs on ext_dev:0"));
  // Both on the other mock device.
  const sdk::host::Device other = rt.registry().find("mockdev")->device(1);
  sdk::host::StagedTensor x1(other, x.t, nullptr), y1(other, y.t, nullptr);
  EXPECT_THAT(error_of([&] { layer.forward(x1.tensor(), y1.tensor()); }),
              HasSubstr("input x is on ext_dev:1, the layer runs on ext_dev:0"));
}

TEST_F(DeviceLinear, DeviceTensorsAreRefusedByACpuLayer) {
  Runtime cpu(with_mock("npu_ref"));
  LinearLayer on_cpu = cpu.linear(ckpt, kLayer);
  Mat x = random_mat(2, w.K, sdk::dtype_f32(), 1);
  Mat y(2, w.N, sdk::dtype_f32());
  sdk::host::StagedTensor x_on(layer.device_memory(), x.t, nullptr);
  EXPECT_THAT(error_of([&] { on_cpu.forward(x_on.tensor(), y.t); }),
              HasSubstr("input x is on ext_dev:0, the layer runs on cpu: it must be in host "
                        "memory (cpu, cuda_host or rocm_host)"));
}

// The plugin takes only memory it handed out: a host pointer that merely claims to be on the
// device is refused by the kernel itself, so the passing tests above really used device memory.
TEST_F(DeviceLinear, AHostPointerClaimingToBeOnTheDeviceIsRefusedByTheKernel) {
  Mat x = random_mat(2, w.K, sdk::dtype_f32(), 1);
  Mat y(2, w.N, sdk::dtype_f32());
  x.t.device = DLDevice{kDLExtDev, 0};
  sdk::host::StagedTensor y_on(layer.device_memory(), y.t, nullptr);
  const std::string e = error_of([&] { layer.forward(x.t, y_on.tensor()); });
  EXPECT_THAT(e, HasSubstr("mockdev/mock_linear forward failed (invalid argument)"));
  EXPECT_THAT(e, HasSubstr("is not mock memory of ext_dev:0 (a host pointer?)"));
}

TEST_F(DeviceLinear, TheDefaultStreamIsNull) {
  // A MockStream counts only what it is given; the overload without a stream passes none, which
  // the mock accepts (it would refuse anything else that is not a MockStream).
  Mat x = random_mat(3, w.K, sdk::dtype_f32(), 2);
  Mat y(3, w.N, sdk::dtype_f32());
  y.poison();
  const sdk::host::Device device = layer.device_memory();
  sdk::host::StagedTensor x_on(device, x.t, nullptr), y_on(device, y.t, nullptr);
  layer.forward(x_on.tensor(), y_on.tensor());
  y_on.download(y.t, nullptr);
  device.synchronize(nullptr);
  EXPECT_LE(rel_err(y, linear_ref(w, x)), declared_bound(rt, layer.placement(), x.t.dtype));
  uint64_t not_a_stream[4] = {1, 2, 3, 4};
  EXPECT_THAT(error_of([&] { layer.forward(x_on.tensor(), y_on.tensor(), not_a_stream); }),
              HasSubstr("the stream is not a mock stream"));
}

TEST_F(DeviceLinear, DeviceBuffersCheckTheirSizeAndStaySeparate) {
  const sdk::host::Device device = layer.device_memory();
  EXPECT_EQ(device.count(), 2);
  sdk::host::DeviceBuffer a = device.alloc(64), b = device.alloc(64);
  EXPECT_NE(a.get(), b.get());
  std::vector<char> text(65, 'x');
  EXPECT_THAT(error_of([&] { a.upload(text.data(), text.size(), nullptr); }),
              HasSubstr("65 bytes do not fit a device buffer of 64"));
  // Host memory is not a copy destination on the device.
  EXPECT_THAT(
      error_of([&] { device.copy(text.data(), a.get(), 8, NIBBLE_COPY_HOST_TO_DEVICE, nullptr); }),
      HasSubstr("copy destination"));
  sdk::host::DeviceBuffer moved = std::move(a);
  EXPECT_EQ(a.get(), nullptr);
  EXPECT_NE(moved.get(), nullptr);
}

}  // namespace
