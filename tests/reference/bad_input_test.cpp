// Bad inputs give clear errors, never a crash: wrong dtypes, wrong K, out-of-range top-k ids,
// weights that disagree with their descriptor. NaN in the input is not an error: it propagates
// to exactly the outputs that depend on it (documented in docs/backends-reference.md).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kernel_runs.hpp"

namespace nibble::test {
namespace {

class ReferenceBadInput : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    plugin = std::make_unique<HarnessPlugin>(GetParam());
    linear = plugin->kernels(NIBBLE_OP_LINEAR).front();
    moe = plugin->kernels(NIBBLE_OP_MOE).back();  // gpu_ref: moe_exllama takes any shape
  }
  std::unique_ptr<HarnessPlugin> plugin;
  const nibble_kernel* linear = nullptr;
  const nibble_kernel* moe = nullptr;
};

std::string forward_error(const PreparedLayer& layer, const DLTensor* x, DLTensor* y,
                          const DLTensor* ids = nullptr, const DLTensor* wts = nullptr,
                          nibble_status expected = NIBBLE_INVALID_ARGUMENT) {
  std::string message;
  EXPECT_EQ(layer.forward(x, y, ids, wts, 2, &message), expected) << message;
  return message;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST_P(ReferenceBadInput, LinearForwardRejectsWrongDtypesAndShapes) {
  const CanonicalWeight w = random_weight(QuantSpec{128, 64, 4, 64});
  auto layer = prepare_linear(linear, linear_desc(w), w);
  Tensor2D x_i32(3, 128, sdk::dtype_i32()), y_i32(3, 64, sdk::dtype_i32());
  EXPECT_TRUE(contains(forward_error(*layer, &x_i32.t, &y_i32.t), "x: dtype i32"));
  Tensor2D x(3, 128, sdk::dtype_f32()), y_f16(3, 64, sdk::dtype_f16());
  EXPECT_TRUE(contains(forward_error(*layer, &x.t, &y_f16.t), "differs from x's f32"));
  Tensor2D x_wrong_k(3, 130, sdk::dtype_f32()), y(3, 64, sdk::dtype_f32());
  EXPECT_TRUE(contains(forward_error(*layer, &x_wrong_k.t, &y.t), "expected 128 columns (K)"));
  Tensor2D y_rows(4, 64, sdk::dtype_f32());
  EXPECT_TRUE(contains(forward_error(*layer, &x.t, &y_rows.t), "rows (as x)"));
}

TEST_P(ReferenceBadInput, PrepareRejectsWeightsThatDisagreeWithTheDescriptor) {
  const CanonicalWeight w = random_weight(QuantSpec{128, 64, 4, 64});
  nibble_layer_desc d = linear_desc(w, "model.q_proj");
  d.N = 128;
  PrepareResult p = try_prepare_linear(linear, d, w);
  EXPECT_EQ(p.status, NIBBLE_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(p.message, "model.q_proj")) << p.message;

  CanonicalWeight bad = w;
  bad.q[5] = 16;  // not a 4-bit value
  p = try_prepare_linear(linear, linear_desc(bad), bad);
  EXPECT_EQ(p.status, NIBBLE_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(p.message, "does not fit 4 bits")) << p.message;

  CanonicalWeight act = random_weight(QuantSpec{128, 64, 4, 64, true, true});
  act.g_idx[3] = 9;  // group 9 of 2
  p = try_prepare_linear(linear, linear_desc(act), act);
  EXPECT_EQ(p.status, NIBBLE_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(p.message, "g_idx[3] = 9")) << p.message;
}

TEST_P(ReferenceBadInput, MoeRejectsBadRoutingAndMismatchedExperts) {
  const TestExperts ex = random_experts(4, 128, 64, 4, 64, 32, false, false, 3);
  nibble_layer_desc d = moe_desc(ex, 2);
  auto layer = prepare_moe(moe, d, ex);
  const Activations xa = random_activations(3, 128, sdk::dtype_f32(), 4);
  auto x = tensor_of(xa);
  Tensor2D y(3, 128, sdk::dtype_f32());
  Tensor2D ids(3, 2, sdk::dtype_i32()), wts(3, 2, sdk::dtype_f32());
  reinterpret_cast<int32_t*>(ids.bytes.data())[3] = 4;  // expert 4 of 4
  EXPECT_TRUE(contains(forward_error(*layer, &x->t, &y.t, &ids.t, &wts.t),
                       "topk_ids[1, 1] = 4 is outside [0, 4)"));
  reinterpret_cast<int32_t*>(ids.bytes.data())[3] = -2;
  EXPECT_TRUE(contains(forward_error(*layer, &x->t, &y.t, &ids.t, &wts.t), "= -2 is outside"));
  Tensor2D ids_f32(3, 2, sdk::dtype_f32());
  EXPECT_TRUE(contains(forward_error(*layer, &x->t, &y.t, &ids_f32.t, &wts.t),
                       "topk_ids: dtype f32 is not int32 or int64"));
  Tensor2D ids_short(3, 1, sdk::dtype_i32());
  EXPECT_TRUE(
      contains(forward_error(*layer, &x->t, &y.t, &ids_short.t, &wts.t), "expected [3, 2]"));
  EXPECT_TRUE(contains(forward_error(*layer, &x->t, &y.t, nullptr, &wts.t), "topk_ids"));

  nibble_layer_desc wrong = d;
  wrong.w2_group_size = 64;  // the experts' w2 use 32
  PrepareResult p = try_prepare_moe(moe, wrong, ex);
  EXPECT_NE(p.status, NIBBLE_OK);
  EXPECT_TRUE(contains(p.message, "expert 0 w2: group size 32, the layer descriptor says 64"))
      << p.message;
  wrong = d;
  wrong.num_experts = 5;
  p = try_prepare_moe(moe, wrong, ex);
  EXPECT_TRUE(contains(p.message, "the source has 4 experts")) << p.message;
}

// NaN in x[m] reaches every output of row m and no other row.
TEST_P(ReferenceBadInput, NanInTheInputPropagatesToItsRowOnly) {
  const CanonicalWeight w = random_weight(QuantSpec{128, 64, 4, 64});
  auto layer = prepare_linear(linear, linear_desc(w), w);
  Activations x = random_activations(3, 128, sdk::dtype_bf16(), 5);
  sdk::store_float(x.bytes.data(), x.dtype, 128 + 17, std::numeric_limits<float>::quiet_NaN());
  const CaseResult r = run_linear(*layer, x, 64, std::vector<double>(3 * 64, 1.0));
  ASSERT_EQ(r.status, NIBBLE_OK) << r.message;
  for (int64_t m = 0; m < 3; ++m)
    for (int64_t n = 0; n < 64; ++n)
      EXPECT_EQ(std::isnan(r.y[size_t(m * 64 + n)]), m == 1) << m << "," << n;

  const TestExperts ex = random_experts(4, 128, 64, 4, 64, 32, true, false, 6);
  auto moe_layer = prepare_moe(moe, moe_desc(ex, 2), ex);
  Routing routing = random_routing(3, 2, 4, 0.0, true, sdk::dtype_f32(), 7);
  const CaseResult rm = run_moe(*moe_layer, x, routing, false, std::vector<double>(3 * 128, 1.0));
  ASSERT_EQ(rm.status, NIBBLE_OK) << rm.message;
  for (int64_t m = 0; m < 3; ++m)
    EXPECT_EQ(std::isnan(rm.y[size_t(m * 128)]), m == 1) << "token " << m;
}

INSTANTIATE_TEST_SUITE_P(Reference, ReferenceBadInput, ::testing::Values("npu_ref", "gpu_ref"));

}  // namespace
}  // namespace nibble::test
