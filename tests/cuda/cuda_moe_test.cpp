// The cuda plugin's fused MoE through its C ABI, with device tensors from the plugin's own device
// memory: random experts (symmetric, asymmetric, 8-bit, act-order, per-channel w2), routings with
// dropped slots, int32 and int64 ids, f32 and bf16 routing weights, ids outside [-1, E) (skipped
// on the device), decode batches whose projections split K over a cluster, against the float64
// reference; then the upstream-packed fixtures (two linear layers and an MoE block) through the
// linear and MoE kernels. Skipped without a GPU.
#include <gtest/gtest.h>
#include <nibble/checkpoint.hpp>
#include <nibble/conformance/fixture_tensors.hpp>
#include <nibble/safetensors.hpp>

#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "kernel_runs.hpp"
#include "launch.hpp"
#include "plugin_device.hpp"

namespace nibble::test {
namespace {

// One MoE forward on the device with `routing`, y compared with `expected`.
DeviceRun run_moe_on_device(const PreparedLayer& p, const Activations& x, const Routing& routing,
                            bool ids_int64, const std::vector<double>& expected) {
  DeviceTensor dx(x.M, x.K, x.dtype), dy(x.M, x.K, x.dtype, x.M % 2 ? x.K + 16 : 0);
  dx.upload(x.bytes);
  const DLDataType id_type = ids_int64 ? sdk::dtype_i64() : sdk::dtype_i32();
  std::vector<uint8_t> ids(routing.ids.size() * (ids_int64 ? 8 : 4));
  std::vector<uint8_t> wts(routing.ids.size() * sdk::dtype_bytes(routing.weight_dtype));
  for (size_t i = 0; i < routing.ids.size(); ++i) {
    if (ids_int64)
      reinterpret_cast<int64_t*>(ids.data())[i] = routing.ids[i];
    else
      reinterpret_cast<int32_t*>(ids.data())[i] = routing.ids[i];
    sdk::store_float(wts.data(), routing.weight_dtype, i, float(routing.weights[i]));
  }
  DeviceTensor did(routing.M, routing.top_k, id_type),
      dw(routing.M, routing.top_k, routing.weight_dtype);
  did.upload(ids);
  dw.upload(wts);
  return run_on_device(p, dx, dy, expected, &did, &dw);
}

struct MoeCase {
  int bits = 4, gs13 = 128, gs2 = 128;
  bool symmetric = true, act_order = false;
  uint32_t seed = 1;
};

// The largest relative error of each activation dtype over the random cases (bf16, f16, f32),
// printed for docs/cuda.md (the fused MoE's errors beside the declared bounds).
double largest_error[3] = {0, 0, 0};

void run_moe_case(const MoeCase& c) {
  const int E = 8, top_k = 2;
  const TestExperts ex =
      random_experts(E, 256, 128, c.bits, c.gs13, c.gs2, c.symmetric, c.act_order, c.seed);
  const nibble_layer_desc d = on_cuda(moe_desc(ex, top_k));
  const nibble_kernel* k = cuda_plugin().kernel("moe_marlin");
  ASSERT_EQ(why_not(k, d), "");
  const std::unique_ptr<PreparedLayer> p = prepare_moe(k, d, ex);
  const DLDataType dtypes[3] = {sdk::dtype_bf16(), sdk::dtype_f16(), sdk::dtype_f32()};
  for (int di = 0; di < 3; ++di)
    for (int64_t M : {1, 3, 8, 16, 64, 300}) {
      const DLDataType dt = dtypes[di];
      const Activations x = random_activations(M, ex.K, dt, uint32_t(M) + c.seed);
      const DLDataType wt = M % 2 ? sdk::dtype_bf16() : sdk::dtype_f32();
      const Routing routing = random_routing(M, top_k, E, 0.15, M % 3 == 0, wt, uint32_t(M) * 7);
      const std::vector<double> ref =
          reference_moe(ex, x.values, M, top_k, routing.ids, routing.weights);
      const DeviceRun r = run_moe_on_device(*p, x, routing, M % 2 == 0, ref);
      ASSERT_EQ(r.status, NIBBLE_OK) << r.message;
      EXPECT_EQ(r.not_finite, 0u) << "M" << M;
      largest_error[di] = std::max(largest_error[di], r.rel_error);
      EXPECT_LE(r.rel_error, bound_for(dt))
          << c.bits << "-bit g" << c.gs13 << "/" << c.gs2 << (c.symmetric ? " sym" : " asym")
          << (c.act_order ? " act-order " : " ") << sdk::dtype_name(dt) << " M" << M;
    }
}

TEST(CudaPluginMoe, RandomExpertsAndRoutings) {
  NIBBLE_REQUIRE_GPU();
  run_moe_case({4, 128, 128, true, false, 1});
  run_moe_case({4, 128, 64, false, false, 2});  // zero points
  run_moe_case({8, 64, -1, true, false, 3});    // 8-bit, per-channel w2
  run_moe_case({4, 128, 128, true, true, 4});   // act-order
  run_moe_case({8, 32, 128, false, false, 5});
  std::printf("largest relative error: bf16 %.3g, f16 %.3g, f32 %.3g\n", largest_error[0],
              largest_error[1], largest_error[2]);
}

// The MoE of E random experts (K × I, 4-bit g128) on M bf16 tokens routed by `routing` (ids as
// the kernel reads them) against float64 on `as_seen` (the ids it must act on).
void expect_routed_moe(int E, int top_k, int64_t M, uint32_t seed, const Routing& routing,
                       const Routing& as_seen, int64_t K = 256, int64_t I = 128) {
  const TestExperts ex = random_experts(E, K, I, 4, 128, 128, true, false, seed);
  const nibble_layer_desc d = on_cuda(moe_desc(ex, top_k));
  const std::unique_ptr<PreparedLayer> p = prepare_moe(cuda_plugin().kernel("moe_marlin"), d, ex);
  const Activations x = random_activations(M, ex.K, sdk::dtype_bf16(), seed + 1);
  const std::vector<double> ref =
      reference_moe(ex, x.values, M, top_k, as_seen.ids, as_seen.weights);
  const DeviceRun r = run_moe_on_device(*p, x, routing, false, ref);
  ASSERT_EQ(r.status, NIBBLE_OK) << r.message;
  EXPECT_EQ(r.not_finite, 0u);
  EXPECT_LE(r.rel_error, bound_for(sdk::dtype_bf16()));
}

// Ids the host did not range-check (device memory): outside [-1, E) they count as no expert.
TEST(CudaPluginMoe, IdsOutsideTheExpertsAreSkipped) {
  NIBBLE_REQUIRE_GPU();
  const int E = 8, top_k = 3;
  const int64_t M = 5;
  Routing routing = random_routing(M, top_k, E, 0.0, true, sdk::dtype_f32(), 4);
  Routing as_seen = routing;
  routing.ids[1] = E + 3;
  routing.ids[4] = -7;
  for (int j = 0; j < top_k; ++j) routing.ids[size_t(2 * top_k + j)] = -1;  // token 2: none
  for (size_t i = 0; i < routing.ids.size(); ++i)
    as_seen.ids[i] = routing.ids[i] >= 0 && routing.ids[i] < E ? routing.ids[i] : -1;
  expect_routed_moe(E, top_k, M, 9, routing, as_seen);
}

// A decode batch whose tokens all name one expert in both slots: that expert holds 16 rows, more
// than one decode work item (8 rows), and runs as two.
TEST(CudaPluginMoe, AnExpertNamedTwiceByEveryToken) {
  NIBBLE_REQUIRE_GPU();
  const int E = 8, top_k = 2;
  const int64_t M = 8;
  Routing routing = random_routing(M, top_k, E, 0.0, true, sdk::dtype_f32(), 6);
  for (auto& id : routing.ids) id = 3;
  expect_routed_moe(E, top_k, M, 11, routing, routing);
}

// The split the plugin's MoE projection of k × n gets for `pairs` routed pairs over `experts`
// experts in items of at most `item_rows` rows (host code: runs without a GPU).
cuda::StreamConfig projection_split(int64_t k, int64_t n, int64_t pairs, int64_t experts,
                                    int32_t item_rows) {
  cuda::GemmArgs a;
  a.w.K = k;
  a.w.N = n;
  a.items = reinterpret_cast<const int4*>(&a);  // not read: the count is on the device
  a.max_items = cuda::max_items(pairs, experts, item_rows);
  a.item_rows = item_rows;
  return cuda::choose_stream_config(a, 132);
}

// Decode batches on experts large enough that both projections split K over a cluster of
// blocks: the reduction whose ranks push their sums into each other's shared memory, with the
// swiglu epilogue (gate/up) and without (down).
TEST(CudaPluginMoe, ClusteredProjectionsAtDecode) {
  const int64_t K = 2048, I = 1024;
  for (const auto& [k, n] : {std::pair<int64_t, int64_t>{K, 2 * I}, {I, K}})  // M = 1, top-2
    ASSERT_GT(projection_split(k, n, 2, 8, 8).cluster, 1) << k << "x" << n;
  NIBBLE_REQUIRE_GPU();
  const int E = 8, top_k = 2;
  for (int64_t M : {1, 3}) {
    const Routing routing =
        random_routing(M, top_k, E, 0.0, false, sdk::dtype_f32(), uint32_t(M) + 20);
    expect_routed_moe(E, top_k, M, 13, routing, routing, K, I);
  }
}

// Batches of more than 8 tokens (items of 16 rows, more blocks than one wave) on experts large
// enough that both projections take four runs per block over a cluster: the 16-row tile's
// cluster reduction with the swiglu epilogue and a bf16 h (gate/up) and without (down).
TEST(CudaPluginMoe, ClusteredProjectionsOfLargerBatches) {
  const int64_t K = 4096, I = 4096;
  for (const auto& [k, n] : {std::pair<int64_t, int64_t>{K, 2 * I}, {I, K}}) {
    const cuda::StreamConfig c = projection_split(k, n, 24, 4, 16);  // M = 12, top-2, 4 experts
    ASSERT_EQ(c.tile_rows, 16) << k << "x" << n;
    ASSERT_EQ(c.runs_per_block, 4) << k << "x" << n;
    ASSERT_GT(c.cluster, 1) << k << "x" << n;
  }
  NIBBLE_REQUIRE_GPU();
  const int E = 4, top_k = 2;
  for (int64_t M : {12, 40}) {
    const Routing routing =
        random_routing(M, top_k, E, 0.0, false, sdk::dtype_f32(), uint32_t(M) + 30);
    expect_routed_moe(E, top_k, M, 17, routing, routing, K, I);
  }
}

std::string fixture(const std::string& name) {
  return std::string(NIBBLE_FIXTURES_DIR) + "/" + name;
}

TEST(CudaPluginFixtures, LinearLayersReproduceTheStoredOutputs) {
  NIBBLE_REQUIRE_GPU();
  for (const std::string name : {"gptq_v1_sym_g128", "awq_gemm_g128"}) {
    const Checkpoint ckpt = Checkpoint::open(fixture(name));
    const auto io = SafetensorsFile::open(fixture(name) + "/io.safetensors");
    const std::vector<LayerInfo> layers = ckpt.linear_layers();
    const auto layer = std::find_if(layers.begin(), layers.end(), [](const LayerInfo& l) {
      return l.kind == LayerKind::Quantized;
    });
    ASSERT_NE(layer, layers.end()) << name;
    const CanonicalWeight w = ckpt.decode_linear(layer->prefix);
    const nibble_layer_desc d = on_cuda(linear_desc(w, layer->prefix.c_str()));
    for (const char* kname : {"linear_marlin", "linear_general"}) {
      const nibble_kernel* k = cuda_plugin().kernel(kname);
      ASSERT_EQ(why_not(k, d), "") << name << " " << kname;
      const std::unique_ptr<PreparedLayer> p = prepare_linear(k, d, w);
      for (int M : {1, 7, 33})
        for (const std::string tag : {"", "bf16_"}) {
          const DLDataType dt = tag.empty() ? sdk::dtype_f32() : sdk::dtype_bf16();
          const std::string m = "m" + std::to_string(M);
          const Activations x = activations_of(io->tensor("x_" + tag + m), dt);
          DeviceTensor dx(M, w.K, dt), dy(M, w.N, dt);
          dx.upload(x.bytes);
          const DeviceRun r = run_on_device(*p, dx, dy, values_of(io->tensor("y_" + tag + m)));
          ASSERT_EQ(r.status, NIBBLE_OK) << r.message;
          EXPECT_EQ(r.not_finite, 0u);
          EXPECT_LE(r.rel_error, declared_bound(k, dt)) << name << " " << kname << " " << tag << m;
        }
    }
  }
}

TEST(CudaPluginFixtures, MoeBlockReproducesTheStoredOutputs) {
  NIBBLE_REQUIRE_GPU();
  const std::string name = "moe_gptq_e8_top2";
  const Checkpoint ckpt = Checkpoint::open(fixture(name));
  const auto io = SafetensorsFile::open(fixture(name) + "/io.safetensors");
  const std::vector<MoeInfo> blocks = ckpt.moe_blocks();
  ASSERT_EQ(blocks.size(), 1u);
  const MoeInfo& b = blocks[0];
  std::vector<std::pair<CanonicalWeight, CanonicalWeight>> decoded;
  for (int e = 0; e < b.num_experts; ++e) decoded.push_back(ckpt.decode_expert(b.prefix, e));
  std::vector<nibble_canonical_weight> w13_views, w2_views;
  for (const auto& [w13, w2] : decoded) {
    w13_views.push_back(w13.view());
    w2_views.push_back(w2.view());
  }
  const sdk::host::MoeShape shape{b.hidden, b.intermediate, b.num_experts, 2};
  const nibble_layer_desc d =
      on_cuda(sdk::host::moe_desc(shape, w13_views, w2_views, b.prefix.c_str()));
  sdk::host::ExpertViews experts(w13_views, w2_views);
  const nibble_kernel* k = cuda_plugin().kernel("moe_marlin");
  ASSERT_EQ(why_not(k, d), "");
  PreparedLayer p(sdk::host::prepare(k, d, sdk::host::experts_input(experts.source())));
  for (int M : {1, 7, 33})
    for (const std::string tag : {"", "bf16_"})
      for (const std::string norm : {"", "norenorm_"}) {
        const DLDataType dt = tag.empty() ? sdk::dtype_f32() : sdk::dtype_bf16();
        const std::string m = "m" + std::to_string(M);
        const Activations x = activations_of(io->tensor("x_" + tag + m), dt);
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
        const DeviceRun r =
            run_moe_on_device(p, x, routing, false, values_of(io->tensor("y_" + norm + tag + m)));
        ASSERT_EQ(r.status, NIBBLE_OK) << r.message;
        EXPECT_EQ(r.not_finite, 0u);
        EXPECT_LE(r.rel_error, declared_bound(k, dt)) << norm << tag << m;
      }
}

}  // namespace
}  // namespace nibble::test
