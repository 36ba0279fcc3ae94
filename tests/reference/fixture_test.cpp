// The reference kernels on the upstream-packed fixtures (conformance/fixtures): a GPTQ v1 and an
// AWQ GEMM linear layer and a GPTQ MoE block, decoded by the core's checkpoint reader, computed by
// every npu_ref / gpu_ref kernel that takes them, and compared with the float64 outputs stored next
// to them (f32 and bf16 inputs, M ∈ {1, 7, 33}, MoE with and without renormalised routing weights).
#include <gtest/gtest.h>
#include <nibble/checkpoint.hpp>
#include <nibble/conformance/fixture_tensors.hpp>
#include <nibble/safetensors.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "kernel_runs.hpp"
#include "reference_plugins.hpp"

namespace nibble::test {
namespace {

std::string fixture(const std::string& name) {
  return std::string(NIBBLE_FIXTURES_DIR) + "/" + name;
}

class ReferenceFixtures : public ReferencePluginsTest<> {};

TEST_F(ReferenceFixtures, LinearLayersReproduceTheStoredOutputs) {
  for (const std::string name : {"gptq_v1_sym_g128", "awq_gemm_g128"}) {
    const Checkpoint ckpt = Checkpoint::open(fixture(name));
    const auto io = SafetensorsFile::open(fixture(name) + "/io.safetensors");
    const std::vector<LayerInfo> layers = ckpt.linear_layers();
    const auto layer = std::find_if(layers.begin(), layers.end(), [](const LayerInfo& l) {
      return l.kind == LayerKind::Quantized;
    });
    ASSERT_NE(layer, layers.end()) << name;
    const CanonicalWeight w = ckpt.decode_linear(layer->prefix);
    nibble_layer_desc d{};
    d.struct_size = sizeof d;
    d.op = NIBBLE_OP_LINEAR;
    d.name = layer->prefix.c_str();
    d.K = w.K;
    d.N = w.N;
    d.bits = w.bits;
    d.group_size = w.group_size;
    d.has_g_idx = w.g_idx.empty() ? 0 : 1;
    d.symmetric = w.symmetric() ? 1 : 0;
    d.has_bias = w.bias.empty() ? 0 : 1;
    d.weight_dtype = w.scales_dtype;
    d.numeric_mode = NIBBLE_MODE_W4A16;
    d.act_dtypes = NIBBLE_DTYPE_F32 | NIBBLE_DTYPE_BF16 | NIBBLE_DTYPE_F16;
    int kernels_run = 0;
    for (const nibble_kernel* k : {npu->kernel("linear_antiquant"), gpu->kernel("linear_marlin"),
                                   gpu->kernel("linear_exllama")}) {
      ASSERT_EQ(why_not(k, d), "") << name << " " << k->name;
      const nibble_canonical_weight cw = w.view();
      const nibble_weight_input in = sdk::host::quantized_input(cw);
      PreparedLayer prepared(sdk::host::prepare(k, d, in));  // throws with the plugin's message
      for (int M : {1, 7, 33})
        for (const std::string tag : {"", "bf16_"}) {
          const DLDataType dt = tag.empty() ? sdk::dtype_f32() : sdk::dtype_bf16();
          std::string m = "m";  // appended: GCC 12 warns falsely (-Wrestrict) on "m" + string
          m += std::to_string(M);
          std::string x_name = "x_";  // appended: GCC 12 warns falsely on chained string +
          x_name += tag;
          x_name += m;
          const Activations x = activations_of(io->tensor(x_name), dt);
          const std::vector<double> expected = values_of(io->tensor("y_" + tag + m));
          const CaseResult r = run_linear(prepared, x, w.N, expected);
          ASSERT_EQ(r.status, NIBBLE_OK) << r.message;
          EXPECT_EQ(r.not_finite, 0u);
          EXPECT_LE(r.rel_error, declared_bound(k, dt))
              << name << " " << k->name << " " << tag << m;
        }
      ++kernels_run;
    }
    EXPECT_EQ(kernels_run, 3);
  }
}

TEST_F(ReferenceFixtures, MoeBlockReproducesTheStoredOutputs) {
  const std::string name = "moe_gptq_e8_top2";
  const Checkpoint ckpt = Checkpoint::open(fixture(name));
  const auto io = SafetensorsFile::open(fixture(name) + "/io.safetensors");
  const std::vector<MoeInfo> blocks = ckpt.moe_blocks();
  ASSERT_EQ(blocks.size(), 1u);
  const MoeInfo& b = blocks[0];
  // Every expert decoded up front (the block is small), so the descriptor speaks for all of them.
  std::vector<std::pair<CanonicalWeight, CanonicalWeight>> decoded;
  for (int e = 0; e < b.num_experts; ++e) decoded.push_back(ckpt.decode_expert(b.prefix, e));
  std::vector<nibble_canonical_weight> w13_views, w2_views;
  for (const auto& [w13, w2] : decoded) {
    w13_views.push_back(w13.view());
    w2_views.push_back(w2.view());
  }
  const sdk::host::MoeShape shape{b.hidden, b.intermediate, b.num_experts, 2};
  const nibble_layer_desc d = sdk::host::moe_desc(shape, w13_views, w2_views, b.prefix.c_str());
  sdk::host::ExpertViews experts(w13_views, w2_views);
  const nibble_weight_input in = sdk::host::experts_input(experts.source());

  // K = 256, I = 384, group 128: both w13 and w2 fit Marlin's rules, so all three kernels run.
  for (const nibble_kernel* k :
       {npu->kernel("moe_antiquant"), gpu->kernel("moe_marlin"), gpu->kernel("moe_exllama")}) {
    ASSERT_EQ(why_not(k, d), "") << k->name;
    PreparedLayer prepared(sdk::host::prepare(k, d, in));  // throws with the plugin's message
    for (int M : {1, 7, 33})
      for (const std::string tag : {"", "bf16_"})
        for (const std::string norm : {"", "norenorm_"}) {
          const DLDataType dt = tag.empty() ? sdk::dtype_f32() : sdk::dtype_bf16();
          std::string m = "m";  // appended: GCC 12 warns falsely (-Wrestrict) on "m" + string
          m += std::to_string(M);
          std::string x_name = "x_";  // appended: GCC 12 warns falsely on chained string +
          x_name += tag;
          x_name += m;
          const Activations x = activations_of(io->tensor(x_name), dt);
          const TensorView& ids = io->tensor("topk_ids_" + tag + m);
          const TensorView& weights = io->tensor("topk_weights_" + norm + tag + m);
          Routing routing;
          routing.M = M;
          routing.top_k = 2;
          routing.weight_dtype = sdk::dtype_f32();
          for (int64_t i = 0; i < ids.numel(); ++i) {
            routing.ids.push_back(ids.i32(size_t(i)));
            routing.weights.push_back(weights.as_double(size_t(i)));
          }
          const std::vector<double> expected = values_of(io->tensor("y_" + norm + tag + m));
          const CaseResult r = run_moe(prepared, x, routing, false, expected);
          ASSERT_EQ(r.status, NIBBLE_OK) << r.message;
          EXPECT_EQ(r.not_finite, 0u);
          // The stored routing weights are f32 roundings of float64 ones: that adds ~6e-8.
          EXPECT_LE(r.rel_error, declared_bound(k, dt)) << k->name << " " << norm << tag << m;
        }
  }
}

}  // namespace
}  // namespace nibble::test
