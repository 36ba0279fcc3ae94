// MoE blocks from an engine's expert tensors, per expert and stacked over experts (w13 = gate and
// up concatenated along N, w2), against Runtime::moe on the upstream-packed fixture: the same
// outputs bit for bit with the engine's routing (forward_routed) and with the router, within the
// kernel's bound of the fixture's float64 outputs; a block without a router; bad blocks refused.
#include <nibble/error.hpp>
#include <nibble/runtime.hpp>

#include <cstring>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "engine_tensors_util.hpp"
#include "layer_test_util.hpp"

using ::testing::AllOf;
using ::testing::HasSubstr;
using namespace nibble;
using namespace nibble::test;

namespace {

const std::string kFixture = std::string(NIBBLE_FIXTURES_DIR) + "/moe_gptq_e8_top2";
const std::string kBlock = "model.layers.0.mlp";
constexpr int kExperts = 8;
constexpr int64_t kHidden = 256;

Mat load(const TensorView& v) {
  Mat m(v.shape[0], v.shape[1], to_dlpack(v.dtype));
  std::memcpy(m.words.data(), v.data, v.nbytes);
  return m;
}

std::vector<double> as_doubles(const TensorView& v) {
  std::vector<double> out(size_t(v.numel()));
  for (size_t i = 0; i < out.size(); ++i) out[i] = v.as_double(i);
  return out;
}

std::string expert(int e, const char* proj) {
  return kBlock + ".experts." + std::to_string(e) + "." + proj;
}

// Every expert's gate, up and down as the engine lends them.
struct PerExpert {
  std::vector<std::array<LentLayer, 3>> lent;
  MoeTensors tensors;
  explicit PerExpert(const Checkpoint& ckpt) {
    for (int e = 0; e < kExperts; ++e) {
      lent.push_back({lend_layer(ckpt, expert(e, "gate_proj")),
                      lend_layer(ckpt, expert(e, "up_proj")),
                      lend_layer(ckpt, expert(e, "down_proj"))});
    }
    for (const auto& l : lent)
      tensors.experts.push_back({quant_tensors(l[0]), quant_tensors(l[1]), quant_tensors(l[2])});
  }
};

// Row-major concatenation of two 2-D tensors along their columns.
OwnedTensor concat_columns(const TensorView& a, const TensorView& b) {
  const size_t e = dtype_size(a.dtype);
  const int64_t rows = a.shape[0], ca = a.shape[1], cb = b.shape[1];
  OwnedTensor o = OwnedTensor::zeros(a.dtype, {rows, ca + cb});
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(o.data.data() + size_t(r * (ca + cb)) * e, a.data + size_t(r * ca) * e,
                size_t(ca) * e);
    std::memcpy(o.data.data() + size_t(r * (ca + cb) + ca) * e, b.data + size_t(r * cb) * e,
                size_t(cb) * e);
  }
  return o;
}

// Tensors of one shape, one after another: [E, ...].
OwnedTensor stack(const std::vector<OwnedTensor>& parts) {
  std::vector<int64_t> shape = parts[0].shape;
  shape.insert(shape.begin(), int64_t(parts.size()));
  OwnedTensor o;
  o.dtype = parts[0].dtype;
  o.shape = shape;
  for (const auto& p : parts) o.data.insert(o.data.end(), p.data.begin(), p.data.end());
  return o;
}

OwnedTensor owned(const TensorView& v) {
  OwnedTensor o;
  o.dtype = v.dtype;
  o.shape = v.shape;
  o.data.assign(v.data, v.data + v.nbytes);
  return o;
}

// The experts stacked as fused-MoE engines keep them.
struct Stacked {
  LentLayer w13, w2;
  MoeTensors tensors;
  explicit Stacked(const Checkpoint& ckpt) {
    std::map<std::string, std::vector<OwnedTensor>> a, b;
    for (int e = 0; e < kExperts; ++e) {
      const TensorStore& s = ckpt.tensors();
      for (const char* t : {"qweight", "qzeros", "scales"}) {
        a[t].push_back(concat_columns(s.tensor(expert(e, "gate_proj") + "." + t),
                                      s.tensor(expert(e, "up_proj") + "." + t)));
        b[t].push_back(owned(s.tensor(expert(e, "down_proj") + "." + t)));
      }
      a["g_idx"].push_back(owned(s.tensor(expert(e, "gate_proj") + ".g_idx")));
      b["g_idx"].push_back(owned(s.tensor(expert(e, "down_proj") + ".g_idx")));
    }
    for (auto& [t, parts] : a) w13[t] = Lent::of(stack(parts));
    for (auto& [t, parts] : b) w2[t] = Lent::of(stack(parts));
    tensors.w13 = quant_tensors(w13);
    tensors.w2 = quant_tensors(w2);
  }
};

bool same_bytes(const Mat& a, const Mat& b) {
  return std::memcmp(a.words.data(), b.words.data(), a.size() * sdk::dtype_bytes(a.t.dtype)) == 0;
}

class MoeFromTensors : public ::testing::TestWithParam<const char*> {};

TEST_P(MoeFromTensors, PerExpertAndStackedRunAsTheCheckpointBlock) {
  Runtime rt(in_tree(GetParam()));
  if (!has_moe_kernel(rt, GetParam())) GTEST_SKIP() << GetParam() << " has no MoE kernel";
  auto ckpt = Checkpoint::open(kFixture);
  auto io = SafetensorsFile::open(kFixture + "/io.safetensors");
  const QuantFormat f = format_of(ckpt);
  const DenseTensor router = ckpt.dense_weight(kBlock + ".gate");
  const nibble_dense_weight router_weight = router.view();
  MoeOptions mo;
  mo.top_k = 2;
  mo.renormalize = true;
  MoeLayer from_ckpt = rt.moe(ckpt, kBlock, mo);
  MoeLayer per_expert, stacked;
  {
    PerExpert p(ckpt);
    per_expert = rt.moe_from_tensors(kBlock, p.tensors, f, &router_weight, mo);
  }
  {
    Stacked s(ckpt);
    stacked = rt.moe_from_tensors(kBlock, s.tensors, f, &router_weight, mo);
  }
  for (const MoeLayer* m : {&per_expert, &stacked}) {
    EXPECT_EQ(m->num_experts(), kExperts);
    EXPECT_EQ(m->hidden(), kHidden);
    EXPECT_EQ(m->placements()[1].kernel, from_ckpt.placements()[1].kernel);
  }
  for (const char* tag : {"", "bf16_"}) {
    for (int M : {1, 7, 33}) {
      const std::string sfx = std::string(tag) + "m" + std::to_string(M);
      Mat x = load(io->tensor("x_" + sfx));
      Mat ids = load(io->tensor("topk_ids_" + sfx));
      Mat wts = load(io->tensor("topk_weights_" + sfx));
      Mat want(M, kHidden, x.t.dtype);
      want.poison();
      from_ckpt.forward_routed(x.t, ids.t, wts.t, want.t);
      Mat want_routed(M, kHidden, x.t.dtype);
      from_ckpt.forward(x.t, want_routed.t);
      for (const MoeLayer* m : {&per_expert, &stacked}) {
        const char* form = m == &per_expert ? "per expert" : "stacked";
        Mat y(M, kHidden, x.t.dtype);
        y.poison();
        m->forward_routed(x.t, ids.t, wts.t, y.t);
        EXPECT_TRUE(same_bytes(y, want)) << form << " " << sfx;
        size_t bad = 0;
        EXPECT_LE(rel_err(y, as_doubles(io->tensor("y_" + sfx)), &bad),
                  2 * declared_bound(rt, m->placements()[1], x.t.dtype))
            << form << " " << sfx;
        EXPECT_EQ(bad, 0u);
        Mat yr(M, kHidden, x.t.dtype);
        yr.poison();
        m->forward(x.t, yr.t);  // the same router, the same routing
        EXPECT_TRUE(same_bytes(yr, want_routed)) << form << " routed " << sfx;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, MoeFromTensors,
                         ::testing::Values("npu_ref", "gpu_ref", "cpu_amx"));

class MoeFromTensorsErrors : public ::testing::Test {
 protected:
  Runtime rt{in_tree("npu_ref")};
  Checkpoint ckpt = Checkpoint::open(kFixture);
  QuantFormat f = format_of(ckpt);
  MoeOptions mo = [] {
    MoeOptions o;
    o.top_k = 2;
    return o;
  }();
  std::string error_of(const MoeTensors& t, const nibble_dense_weight* router = nullptr) {
    try {
      rt.moe_from_tensors(kBlock, t, f, router, mo);
    } catch (const Error& e) {
      return e.what();
    }
    return "(no error)";
  }
};

TEST_F(MoeFromTensorsErrors, WithoutARouterOnlyEngineRoutingRuns) {
  Stacked s(ckpt);
  MoeLayer m = rt.moe_from_tensors(kBlock, s.tensors, f, nullptr, mo);
  EXPECT_FALSE(m.has_router());
  EXPECT_EQ(m.placements().size(), 1u);
  Mat x = random_mat(2, kHidden, sdk::dtype_f32(), 3);
  Mat y(2, kHidden, sdk::dtype_f32());
  try {
    m.forward(x.t, y.t);
    FAIL() << "forward ran without a router";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(),
                AllOf(HasSubstr(kBlock), HasSubstr("no router"), HasSubstr("forward_routed")));
  }
  int32_t ids[4] = {1, 6, 0, -1};
  float w[4] = {0.75f, 0.25f, 1.f, 0.f};
  int64_t sh[2] = {2, 2};
  DLTensor ti{ids, {kDLCPU, 0}, 2, sdk::dtype_i32(), sh, nullptr, 0};
  DLTensor tw{w, {kDLCPU, 0}, 2, sdk::dtype_f32(), sh, nullptr, 0};
  y.poison();
  m.forward_routed(x.t, ti, tw, y.t);
  for (size_t i = 0; i < y.size(); ++i) EXPECT_TRUE(std::isfinite(y.get(i)));
}

TEST_F(MoeFromTensorsErrors, BadBlocksAreRefusedByName) {
  MoeTensors none;
  EXPECT_THAT(error_of(none), AllOf(HasSubstr(kBlock), HasSubstr("no experts are set")));
  PerExpert p(ckpt);
  Stacked s(ckpt);
  MoeTensors both = p.tensors;
  both.w13 = s.tensors.w13;
  both.w2 = s.tensors.w2;
  EXPECT_THAT(error_of(both), HasSubstr("both forms are set"));
  mo.top_k = 0;
  EXPECT_THAT(error_of(p.tensors), AllOf(HasSubstr("top_k = 0"), HasSubstr("> 0")));
  mo.top_k = 9;
  EXPECT_THAT(error_of(p.tensors), HasSubstr("top-k 9 exceeds the 8 experts"));
  mo.top_k = 2;
  // A stacked scales tensor over 7 experts while qweight has 8.
  Lent& scales = *s.w13.at("scales");
  scales.shape[0] = 7;
  EXPECT_THAT(error_of(s.tensors),
              AllOf(HasSubstr(kBlock + ".w13.scales"), HasSubstr("[7, 2, 768]"),
                    HasSubstr("the E = 8 experts of " + kBlock + ".w13.qweight")));
  scales.shape[0] = 8;
  // An expert whose down projection is another expert's gate: K and N swapped.
  MoeTensors swapped = p.tensors;
  swapped.experts[3].down = swapped.experts[3].gate;
  EXPECT_THAT(error_of(swapped),
              AllOf(HasSubstr(kBlock + ".experts.3.down"), HasSubstr("expected K = 384, N = 256")));
  // A router of the wrong size.
  const DenseTensor router = ckpt.dense_weight(kBlock + ".gate");
  nibble_dense_weight r = router.view();
  r.N = 7;
  EXPECT_THAT(error_of(p.tensors, &r),
              AllOf(HasSubstr("router weight is [7, 256]"), HasSubstr("expected [8, 256]")));
  // An expert tensor that is wrong is named as in a linear layer.
  p.lent[5][1].erase("scales");
  MoeTensors missing;
  for (const auto& l : p.lent)
    missing.experts.push_back({quant_tensors(l[0]), quant_tensors(l[1]), quant_tensors(l[2])});
  EXPECT_THAT(error_of(missing), HasSubstr(kBlock + ".experts.5.up.scales is missing"));
}

}  // namespace
