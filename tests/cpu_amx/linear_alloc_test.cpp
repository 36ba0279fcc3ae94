// A warm cpu_amx linear forward allocates nothing on its caller's thread, at any thread count the
// pool's work queues keep in place (up to 256; 40 here, past the 32 they once held): the
// activation buffers, the tile kernels' scratch and the queues are kept or live on the stack.
// Allocations are counted on the calling thread only (counting_new.hpp): a worker's first share
// of a call may make its own per-thread buffers at any later call on a loaded machine, while
// whatever a call allocates for itself, it allocates on its caller.
#include <gtest/gtest.h>

#include "counting_new.hpp"
#include "cpu_amx_test_util.hpp"

namespace nibble::test {
namespace {

// A linear layer prepared through the C ABI, and one forward of M rows with caller-made tensors
// and workspace, so that nothing of the harness runs inside the counted call.
class LinearCall {
 public:
  LinearCall(const nibble_kernel* k, const CanonicalWeight& w, int mode, int64_t M, int threads)
      : k_(k) {
    const nibble_layer_desc d = desc_for(w, mode);
    EXPECT_EQ(why_not(k, d), "");
    const nibble_canonical_weight view = w.view();
    const nibble_weight_input in = sdk::host::quantized_input(view);
    ErrorBuffer err;
    EXPECT_EQ(k->prepare(k, &d, &in, &p_, err.get()), NIBBLE_OK) << err.text();
    x_ = random_activations(M, w.K, sdk::dtype_bf16(), 3);
    xt_ = tensor_of(x_);
    yt_ = std::make_unique<Tensor2D>(M, w.N, sdk::dtype_bf16());
    size_t bytes = 0;
    EXPECT_EQ(k->workspace_bytes(k, p_, M, &bytes, err.get()), NIBBLE_OK) << err.text();
    exec_ = caller_exec(workspace_, bytes, threads);
    args_.struct_size = sizeof args_;
    args_.x = &xt_->t;
    args_.y = &yt_->t;
  }
  ~LinearCall() {
    if (p_) k_->release(k_, p_);
  }
  LinearCall(const LinearCall&) = delete;
  LinearCall& operator=(const LinearCall&) = delete;

  /// One forward; the allocations it made on this thread.
  long allocations() {
    start_counting_allocations(CountOn::this_thread);
    const nibble_status s = k_->forward(k_, p_, &args_, &exec_, err_.get());
    const long n = stop_counting_allocations();
    EXPECT_EQ(s, NIBBLE_OK) << err_.text();
    return n;
  }

 private:
  const nibble_kernel* k_;
  nibble_prepared* p_ = nullptr;
  Activations x_;
  std::unique_ptr<Tensor2D> xt_, yt_;
  std::vector<uint8_t> workspace_;
  nibble_forward_args args_{};
  nibble_exec exec_{};
  ErrorBuffer err_;
};

TEST(CpuAmxLinearAllocations, AWarmForwardAllocatesNothingOnItsCaller) {
  // 2 MiB of 4-bit weight over 128 panel pairs: a call splits into as many parts as threads.
  QuantSpec spec;
  spec.K = 1024;
  spec.N = 4096;
  spec.bits = 4;
  spec.group_size = 128;
  spec.symmetric = false;
  spec.seed = 17;
  const CanonicalWeight w = random_weight(spec);
  for (const char* name : {"linear_a16", "linear_a8"}) {
    const nibble_kernel* k = cpu_amx().kernel(name);
    ASSERT_NE(k, nullptr) << name;
    const int mode = std::string(name) == "linear_a16" ? NIBBLE_MODE_W4A16 : NIBBLE_MODE_W4A8;
    for (const int threads : {1, 3, 40})
      for (const int64_t M : {1, 16, 40}) {
        const std::string what =
            std::string(name) + " threads " + std::to_string(threads) + " M " + std::to_string(M);
        LinearCall call(k, w, mode, M, threads);
        call.allocations();  // the caller's own buffers, the first time
        long later = 0;
        for (int i = 0; i < 10; ++i) later += call.allocations();
        EXPECT_EQ(later, 0) << what;
      }
  }
}

}  // namespace
}  // namespace nibble::test
