// moe_marlin: the fused MoE on the Marlin layout. Prepare pulls the experts one at a time, puts
// each w13's gate and up rows side by side in runs of 32 (so one 64-wide Marlin run holds the gate
// and up outputs of the same 32 intermediate columns, and the gate/up GEMM's epilogue can apply
// silu(gate) · up), and uploads every expert into two stacks. Forward, on the call's stream:
// route (pairs sorted by expert on the device), gate/up with the SwiGLU epilogue into h (bf16
// with bf16 activations, else fp32), down projection of h (an fp32 h as two bf16 terms), then the
// weighted sum of each token's slots into y. Scratch is stream-ordered; the host workspace is 0
// bytes.
#include <nibble/sdk/portable_kernels.hpp>

#include "cuda_error.hpp"
#include "kernels.hpp"
#include "marlin_weight.hpp"
#include "stream_scratch.hpp"

namespace nibble::cuda {

namespace {

// w13 [2I][K] with its output rows reordered: run b of 64 holds gate rows 32b .. 32b+31, then up
// rows 32b .. 32b+31 (scales and zero points follow their rows). Owns its arrays.
struct InterleavedW13 {
  std::vector<uint8_t> q, zeros, scales;
  nibble_canonical_weight c{};

  explicit InterleavedW13(const sdk::QuantWeight& w) {
    const nibble_canonical_weight& src = w.raw();
    const int64_t K = w.K(), N = w.N(), I = N / 2, G = w.num_groups();
    const size_t sb = sdk::dtype_bytes(src.scales_dtype);
    q.resize(size_t(N * K));
    zeros.resize(size_t(G * N));
    scales.resize(size_t(G * N) * sb);
    for (int64_t r = 0; r < N; ++r) {
      const int64_t b = r / 64, j = r % 64;
      const int64_t from = j < 32 ? 32 * b + j : I + 32 * b + (j - 32);
      std::copy(src.q + from * K, src.q + (from + 1) * K, q.begin() + r * K);
      for (int64_t g = 0; g < G; ++g) {
        zeros[size_t(g * N + r)] = src.zeros[g * N + from];
        std::memcpy(&scales[size_t(g * N + r) * sb],
                    static_cast<const uint8_t*>(src.scales) + size_t(g * N + from) * sb, sb);
      }
    }
    c = src;
    c.q = q.data();
    c.zeros = zeros.data();
    c.scales = scales.data();
  }
};

DType act_dtype(DLDataType t) {
  if (sdk::same_dtype(t, sdk::dtype_f16())) return DType::f16;
  if (sdk::same_dtype(t, sdk::dtype_bf16())) return DType::bf16;
  return DType::f32;
}

size_t aligned(size_t bytes) { return (bytes + 255) / 256 * 256; }

class MarlinMoePrepared : public sdk::Prepared {
 public:
  MarlinMoePrepared(int device, std::unique_ptr<MarlinStack> w13, std::unique_ptr<MarlinStack> w2,
                    int64_t K, int64_t I, int32_t E)
      : device_(device), w13_(std::move(w13)), w2_(std::move(w2)), K_(K), I_(I), E_(E) {
    check(cudaDeviceGetAttribute(&sms_, cudaDevAttrMultiProcessorCount, device),
          "cudaDeviceGetAttribute(multiprocessor count)");
  }
  size_t bytes() const override { return w13_->bytes() + w2_->bytes(); }
  void forward(const sdk::ForwardArgs& f, const sdk::Exec& e) const override {
    const std::string what = std::string(desc().name) + ": moe_marlin";
    DeviceGuard guard(device_);
    const cudaStream_t stream = static_cast<cudaStream_t>(e.stream);
    const int32_t top_k = int32_t(f.topk_ids.cols);
    // Decode batches (up to 8 tokens: an expert holds at most 8 rows unless a token names it
    // twice) run in items of 8 rows, where the Marlin kernel takes the weight as the MMA's A
    // operand; larger batches in items of 16.
    const int32_t item_rows = f.M <= 8 ? 8 : 16;
    const int64_t M = f.M, P = M * top_k, items = max_items(P, E_, item_rows);
    const bool ids64 = f.topk_ids.dtype.bits == 64;
    // h = silu(gate) · up: with bf16 activations rounded once to bf16, the tensor a bf16
    // model's own forward holds there (the down projection then takes one MMA per tile where
    // the two bf16 terms of an fp32 h take two); f16 and f32 activations keep it in fp32 (f16's
    // range is narrower than the product's).
    const DType h_dtype = act_dtype(f.x.dtype) == DType::bf16 ? DType::bf16 : DType::f32;
    // Scratch: sorted pairs, work items and their count, h [P][I] and the down outputs [P][K].
    const size_t at_items = aligned(size_t(P) * 4),
                 at_count = at_items + aligned(size_t(items) * 16), at_h = at_count + 256,
                 at_down = at_h + aligned(size_t(P * I_) * dtype_size(h_dtype)),
                 total = at_down + aligned(size_t(P * K_) * 4);
    StreamScratch scratch(total, stream, what);

    RouteArgs r;
    r.ids = f.topk_ids.data;
    r.ld_ids = f.topk_ids.stride;
    r.ids_int64 = ids64;
    r.M = M;
    r.top_k = top_k;
    r.num_experts = E_;
    r.sorted = scratch.at<int32_t>();
    r.items = scratch.at<int4>(at_items);
    r.item_count = scratch.at<int32_t>(at_count);
    r.item_rows = item_rows;
    check(launch_route(r, stream), what + ": routing");

    GemmArgs up;
    up.w = w13_->view();
    up.x = f.x.data;
    up.ldx = f.x.stride;
    up.x_dtype = act_dtype(f.x.dtype);
    up.y = scratch.at<void>(at_h);
    up.ldy = I_;
    up.y_dtype = h_dtype;
    up.epilogue = Epilogue::swiglu;
    up.M = P;
    up.items = r.items;
    up.item_count = r.item_count;
    up.max_items = items;
    up.item_rows = item_rows;
    up.sorted = r.sorted;
    up.top_k = top_k;
    up.x_by_token = true;
    check(launch_marlin_stream(up, choose_stream_config(up, sms_), stream), what + ": gate/up");

    GemmArgs down = up;
    down.w = w2_->view();
    down.x = scratch.at<void>(at_h);
    down.ldx = I_;
    down.x_dtype = h_dtype;
    down.y = scratch.at<float>(at_down);
    down.y_dtype = DType::f32;
    down.ldy = K_;
    down.epilogue = Epilogue::store;
    down.x_by_token = false;
    down.y_by_pair = true;
    check(launch_marlin_stream(down, choose_stream_config(down, sms_), stream), what + ": down");

    CombineArgs c;
    c.down = scratch.at<float>(at_down);
    c.ids = f.topk_ids.data;
    c.ld_ids = f.topk_ids.stride;
    c.ids_int64 = ids64;
    c.weights = f.topk_weights.data;
    c.ld_weights = f.topk_weights.stride;
    c.weights_dtype = act_dtype(f.topk_weights.dtype);
    c.y = f.y.data;
    c.ldy = f.y.stride;
    c.y_dtype = act_dtype(f.y.dtype);
    c.M = M;
    c.K = K_;
    c.top_k = top_k;
    c.num_experts = E_;
    check(launch_combine(c, stream), what + ": combine");
  }

 private:
  int device_;
  std::unique_ptr<MarlinStack> w13_, w2_;
  int64_t K_, I_;
  int32_t E_;
  int sms_ = 0;
};

class MarlinMoe : public sdk::Kernel {
 public:
  sdk::KernelInfo info() const override {
    return kernel_info("moe_marlin", NIBBLE_OP_MOE, kMarlinPriority, NIBBLE_MODE_W4A16);
  }
  std::string why_not(const nibble_layer_desc& d) const override {
    if (d.op != NIBBLE_OP_MOE) return "moe_marlin computes MoE layers only";
    std::string why = why_not_quantized(d);
    if (!why.empty()) return why;
    why = sdk::portable::why_not_moe_routing(d);
    if (!why.empty()) return why;
    if (d.num_experts > kMaxRoutedExperts)
      return std::to_string(d.num_experts) + " experts: moe_marlin routes at most " +
             std::to_string(kMaxRoutedExperts);
    why = sdk::marlin::why_not(d.K, 2 * d.N, d.group_size, d.has_g_idx != 0, d.symmetric != 0,
                               d.bits, sdk::max_zero(d), "w13");
    if (!why.empty()) return why;
    return sdk::marlin::why_not(d.N, d.K, d.w2_group_size, d.w2_has_g_idx != 0, d.w2_symmetric != 0,
                                d.bits, sdk::max_zero(d, true), "w2");
  }
  std::unique_ptr<sdk::Prepared> prepare(const nibble_layer_desc& d,
                                         const nibble_weight_input& in) const override {
    const nibble_moe_source& src = *in.experts;
    const std::string layer = sdk::portable::layer_name(d);
    sdk::require(src.num_experts == d.num_experts,
                 layer + ": the source has " + std::to_string(src.num_experts) +
                     " experts, the layer descriptor says " + std::to_string(d.num_experts));
    sdk::require(src.get_expert != nullptr, layer + ": the expert source has no get_expert");
    const int device = sdk::layer_device(d).device_id;
    std::unique_ptr<MarlinStack> w13, w2;
    for (int32_t e = 0; e < d.num_experts; ++e) {
      nibble_canonical_weight a{}, b{};
      a.struct_size = sizeof a;
      b.struct_size = sizeof b;
      nibble_error err{};
      err.struct_size = sizeof err;
      const nibble_status s = src.get_expert(src.ctx, e, &a, &b, &err);
      if (s != NIBBLE_OK)
        throw sdk::PluginError(
            s, layer + ": fetching expert " + std::to_string(e) + " failed: " + err.message);
      struct GiveBack {
        const nibble_moe_source& src;
        int32_t e;
        ~GiveBack() {
          if (src.put_expert) src.put_expert(src.ctx, e);
        }
      } give_back{src, e};
      const std::string name = layer + " expert " + std::to_string(e);
      sdk::QuantWeight qa(a, name + " w13"), qb(b, name + " w2");
      sdk::portable::check_expert_weight(qa, d, e, true);
      sdk::portable::check_expert_weight(qb, d, e, false);
      const InterleavedW13 interleaved(qa);
      const MarlinHost h13 = pack_marlin(sdk::QuantWeight(interleaved.c, name + " w13"),
                                         d.symmetric == 0, name + " w13");
      const MarlinHost h2 = pack_marlin(qb, d.w2_symmetric == 0, name + " w2");
      if (!w13) {
        w13 = std::make_unique<MarlinStack>(device, d.num_experts, h13);
        w2 = std::make_unique<MarlinStack>(device, d.num_experts, h2);
      } else {
        w13->put(e, h13, name + " w13");
        w2->put(e, h2, name + " w2");
      }
    }
    return std::make_unique<MarlinMoePrepared>(device, std::move(w13), std::move(w2), d.K, d.N,
                                               d.num_experts);
  }
};

}  // namespace

std::unique_ptr<sdk::Kernel> make_marlin_moe() { return std::make_unique<MarlinMoe>(); }

}  // namespace nibble::cuda
