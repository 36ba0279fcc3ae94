// A warm cpu_amx MoE forward allocates nothing: its plan (routing, offsets, tasks, pieces) and its
// per-thread blocks are kept from call to call, so once every thread has taken part in a call of
// that size no call allocates. Allocations are counted on every thread, the plugin's and its
// workers' included (counting_new.hpp).
#include <gtest/gtest.h>

#include "counting_new.hpp"
#include "cpu_amx_test_util.hpp"
#include "kernel_runs.hpp"

namespace nibble::test {
namespace {

// The experts prepared through the C ABI, released at the end; the raw handle is what a forward
// below takes, so that nothing of the harness runs (or allocates) inside the counted call.
class RawMoe {
 public:
  RawMoe(const nibble_kernel* k, const nibble_layer_desc& d, const TestExperts& ex) : k_(k) {
    nibble_moe_source src{};
    src.struct_size = sizeof src;
    src.num_experts = int32_t(ex.w13.size());
    src.ctx = const_cast<TestExperts*>(&ex);
    src.get_expert = [](void* ctx, int32_t e, nibble_canonical_weight* w13,
                        nibble_canonical_weight* w2, nibble_error*) {
      *w13 = static_cast<TestExperts*>(ctx)->w13[size_t(e)].view();
      *w2 = static_cast<TestExperts*>(ctx)->w2[size_t(e)].view();
      return nibble_status(NIBBLE_OK);
    };
    src.put_expert = [](void*, int32_t) {};
    nibble_weight_input in{};
    in.struct_size = sizeof in;
    in.experts = &src;
    ErrorBuffer err;
    EXPECT_EQ(k->prepare(k, &d, &in, &p_, err.get()), NIBBLE_OK) << err.text();
  }
  ~RawMoe() {
    if (p_) k_->release(k_, p_);
  }
  RawMoe(const RawMoe&) = delete;
  RawMoe& operator=(const RawMoe&) = delete;
  const nibble_prepared* get() const { return p_; }

 private:
  const nibble_kernel* k_;
  nibble_prepared* p_ = nullptr;
};

// One MoE forward through the C ABI with caller-made tensors and workspace (nothing of the
// harness allocates inside it); returns the allocations it made.
class MoeCall {
 public:
  MoeCall(const nibble_kernel* k, const RawMoe& layer, const TestExperts& ex, int64_t M, int top_k,
          int threads)
      : k_(k), layer_(layer), threads_(threads) {
    x_ = random_activations(M, ex.K, sdk::dtype_bf16(), 3);
    xt_ = tensor_of(x_);
    yt_ = std::make_unique<Tensor2D>(M, ex.K, sdk::dtype_bf16());
    routing_ = random_routing(M, top_k, int(ex.w13.size()), 0.1, true, sdk::dtype_f32(), 5);
    ids_ = std::make_unique<Tensor2D>(M, top_k, sdk::dtype_i32());
    weights_ = std::make_unique<Tensor2D>(M, top_k, sdk::dtype_f32());
    for (size_t i = 0; i < routing_.ids.size(); ++i) {
      reinterpret_cast<int32_t*>(ids_->bytes.data())[i] = routing_.ids[i];
      reinterpret_cast<float*>(weights_->bytes.data())[i] = float(routing_.weights[i]);
    }
    ErrorBuffer err;
    size_t bytes = 0;
    EXPECT_EQ(k->workspace_bytes(k, layer.get(), M, &bytes, err.get()), NIBBLE_OK) << err.text();
    exec_ = caller_exec(workspace_, bytes, threads_);
    args_.struct_size = sizeof args_;
    args_.x = &xt_->t;
    args_.y = &yt_->t;
    args_.topk_ids = &ids_->t;
    args_.topk_weights = &weights_->t;
  }

  long allocations() {
    start_counting_allocations();
    const nibble_status s = k_->forward(k_, layer_.get(), &args_, &exec_, err_.get());
    const long n = stop_counting_allocations();
    EXPECT_EQ(s, NIBBLE_OK) << err_.text();
    return n;
  }

 private:
  const nibble_kernel* k_;
  const RawMoe& layer_;
  int threads_;
  Activations x_;
  std::unique_ptr<Tensor2D> xt_, yt_, ids_, weights_;
  Routing routing_;
  std::vector<uint8_t> workspace_;
  nibble_forward_args args_{};
  nibble_exec exec_{};
  ErrorBuffer err_;
};

TEST(CpuAmxMoeAllocations, AWarmForwardAllocatesNothing) {
  for (const char* name : {"moe_a16", "moe_a8"}) {
    const nibble_kernel* k = cpu_amx().kernel(name);
    ASSERT_NE(k, nullptr) << name;
    // I = 64 takes the interleaved gate/up path, I = 72 the separate one; act-order gives every
    // expert its own activation layout.
    for (const int64_t I : {64, 72}) {
      const TestExperts ex = random_experts(8, 128, I, 4, 64, 64, false, I == 72, 11);
      nibble_layer_desc d = moe_desc(ex, 2);
      d.numeric_mode = std::string(name) == "moe_a16" ? NIBBLE_MODE_W4A16 : NIBBLE_MODE_W4A8;
      ASSERT_EQ(why_not(k, d), "") << name;
      RawMoe layer(k, d, ex);
      ASSERT_NE(layer.get(), nullptr) << name;
      for (const int64_t M : {1, 40}) {
        const std::string what =
            std::string(name) + " I=" + std::to_string(I) + " M=" + std::to_string(M);
        // On the calling thread alone the plan is the only state: the second call allocates
        // nothing, exactly.
        MoeCall alone(k, layer, ex, M, 2, 1);
        const long first = alone.allocations();
        if (M == 1 && I == 64 && std::string(name) == "moe_a16") {
          EXPECT_GT(first, 0) << "the counter does not see the plugin's allocations";
        }
        EXPECT_EQ(alone.allocations(), 0) << what;
        // With workers, each pool thread makes its own buffers (a few kinds) the first time it
        // takes part in a call of each path, which under load (a sanitizer, a busy machine) may
        // be any later call. So only a few calls may allocate, where an allocation per call
        // would show up in every one of these calls.
        constexpr int kThreads = 3, kCalls = 100, kFirstTimes = 4 * (kThreads - 1);
        MoeCall pooled(k, layer, ex, M, 2, kThreads);
        pooled.allocations();
        int allocating_calls = 0;
        for (int i = 0; i < kCalls; ++i) allocating_calls += pooled.allocations() > 0 ? 1 : 0;
        EXPECT_LE(allocating_calls, kFirstTimes) << what << ": calls that allocated, of " << kCalls;
      }
    }
  }
}

}  // namespace
}  // namespace nibble::test
