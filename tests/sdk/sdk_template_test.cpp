// The template plugin, built out of tree against the installed SDK, loads and computes a layer
// that matches the float64 reference.
#include <nibble/registry.hpp>

#include <gtest/gtest.h>

#include "plugin_harness.hpp"
#include "reference.hpp"

namespace {

TEST(SdkOutOfTree, TemplatePluginLoadsAndMatchesTheReference) {
  nibble::RuntimeOptions o;
  o.use_default_plugin_dir = false;
  o.plugin_dirs = {NIBBLE_TEMPLATE_DIR};
  auto reg = nibble::Registry::load(o);
  const nibble::BackendInfo* b = reg->find("template");
  ASSERT_NE(b, nullptr) << (reg->reports().empty() ? "no file" : reg->reports()[0].message);
  ASSERT_TRUE(b->available);
  ASSERT_EQ(b->kernels.size(), 2u);

  nibble::test::QuantSpec spec;
  spec.K = 96;
  spec.N = 40;
  spec.group_size = 32;
  spec.bias = true;
  auto w = nibble::test::random_weight(spec);
  nibble_layer_desc d = nibble::test::linear_desc(w);
  auto sel = reg->select(d, "template");
  auto prepared = nibble::test::prepare_linear(sel.kernel->kernel, d, w);
  auto x = nibble::test::random_activations(3, spec.K, nibble::sdk::dtype_f32(), 7);
  nibble::test::Tensor2D xt(3, spec.K, x.dtype), yt(3, spec.N, x.dtype);
  std::memcpy(xt.bytes.data(), x.bytes.data(), x.bytes.size());
  nibble::test::poison(yt.bytes, yt.t.dtype);
  ASSERT_EQ(prepared->forward(&xt.t, &yt.t), NIBBLE_OK);
  size_t bad = 0;
  auto y = nibble::test::read_output(yt.bytes, yt.t.dtype, size_t(3 * spec.N), &bad);
  EXPECT_EQ(bad, 0u);
  EXPECT_LT(nibble::test::relative_error(y, nibble::test::reference_linear(w, x.values, 3)), 1e-6);
}

}  // namespace
