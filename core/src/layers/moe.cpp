// MoE blocks: the router in the core (gate linear, softmax or sigmoid scores, top-k, optional
// renormalisation); the experts in the backend's MoE kernel, fed one expert at a time. On a
// device the router's dense kernel runs there too (x is there); its logits come back to the host,
// routing happens here as on the CPU, and the ids and weights go to the device for the experts.
#include <nibble/error.hpp>
#include <nibble/log.hpp>
#include <nibble/runtime.hpp>
#include <nibble/safetensors.hpp>
#include <nibble/sdk/device.hpp>
#include <nibble/sdk/host/device.hpp>
#include <nibble/sdk/host/layer_desc.hpp>
#include <nibble/sdk/host/matrix.hpp>
#include <nibble/sdk/host/prepared.hpp>
#include <nibble/sdk/numeric.hpp>
#include <nibble/untrusted_text.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <thread>

#include "prepared_kernel.hpp"
#include "text/name_text.hpp"

namespace nibble {

std::shared_ptr<const PreparedKernel> make_dense(const std::shared_ptr<const Registry>& reg,
                                                 const RuntimeOptions& o, const DLDevice& device,
                                                 const Checkpoint& ckpt, const std::string& prefix,
                                                 const char* part);

namespace {

// Hands experts to the plugin one at a time; each lives from get_expert to put_expert.
struct ExpertFeed {
  const Checkpoint* ckpt;
  std::string prefix;
  std::map<int, std::pair<CanonicalWeight, CanonicalWeight>> live;

  static nibble_status get(void* ctx, int32_t e, nibble_canonical_weight* w13,
                           nibble_canonical_weight* w2, nibble_error* error) {
    auto* self = static_cast<ExpertFeed*>(ctx);
    try {
      auto& slot = self->live[e] = self->ckpt->decode_expert(self->prefix, e);
      *w13 = slot.first.view();
      *w2 = slot.second.view();
      return NIBBLE_OK;
    } catch (const std::exception& ex) {
      if (error && error->struct_size > offsetof(nibble_error, message)) {
        std::snprintf(error->message, sizeof error->message, "%s", ex.what());
      }
      return NIBBLE_INVALID_ARGUMENT;
    }
  }
  static void put(void* ctx, int32_t e) { static_cast<ExpertFeed*>(ctx)->live.erase(e); }
};

// Top-k routing of M rows of E router logits: softmax or sigmoid scores in double, the k best
// (ties to the lower expert id, so routing is reproducible), optionally renormalised.
void route_logits(const float* logits, int64_t M, int E, int k, bool sigmoid, bool renormalize,
                  std::vector<int32_t>& ids, std::vector<float>& weights) {
  ids.assign(size_t(M * k), -1);
  weights.assign(size_t(M * k), 0.f);
  std::vector<double> p(static_cast<size_t>(E));
  std::vector<int> order(static_cast<size_t>(E));
  for (int64_t m = 0; m < M; ++m) {
    const float* l = &logits[size_t(m * E)];
    if (sigmoid) {
      for (int e = 0; e < E; ++e) p[size_t(e)] = 1.0 / (1.0 + std::exp(-double(l[e])));
    } else {
      double mx = *std::max_element(l, l + E);
      double sum = 0;
      for (int e = 0; e < E; ++e) sum += p[size_t(e)] = std::exp(double(l[e]) - mx);
      for (int e = 0; e < E; ++e) p[size_t(e)] /= sum;
    }
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int a, int b) {
      return p[size_t(a)] > p[size_t(b)] || (p[size_t(a)] == p[size_t(b)] && a < b);
    });
    double total = 0;
    for (int j = 0; j < k; ++j) total += p[size_t(order[size_t(j)])];
    for (int j = 0; j < k; ++j) {
      double w = p[size_t(order[size_t(j)])];
      if (renormalize && total > 0) w /= total;
      ids[size_t(m * k + j)] = order[size_t(j)];
      weights[size_t(m * k + j)] = float(w);
    }
  }
}

}  // namespace

nibble_layer_desc Runtime::describe_experts(const MoeInfo& info, int top_k,
                                            const char* name) const {
  nibble_layer_desc d{};
  d.struct_size = sizeof d;
  d.op = NIBBLE_OP_MOE;
  d.name = name;
  d.K = info.hidden;
  d.N = info.intermediate;
  d.bits = info.w13_bits;
  d.group_size = info.w13_group_size;
  d.has_g_idx = info.act_order ? 1 : 0;
  d.symmetric = info.w13_symmetric ? 1 : 0;
  d.has_bias = 0;
  const std::optional<DType> scales = parse_dtype(info.dtype);
  if (!scales)
    throw Error("MoE block " + detail::name_text(info.prefix) + ": scales dtype " +
                detail::name_text(info.dtype) + " is not one of F16, BF16, F32");
  d.weight_dtype = to_dlpack(*scales);
  d.numeric_mode = numeric_mode();
  d.act_dtypes = NIBBLE_DTYPE_F32 | NIBBLE_DTYPE_F16 | NIBBLE_DTYPE_BF16;
  d.num_experts = info.num_experts;
  d.top_k = top_k;
  d.activation = NIBBLE_ACT_SILU;
  d.w2_group_size = info.w2_group_size;
  d.w2_has_g_idx = info.act_order ? 1 : 0;
  d.w2_symmetric = info.w2_symmetric ? 1 : 0;
  d.max_zero = info.w13_max_zero;
  d.w2_max_zero = info.w2_max_zero;
  sdk::host::set_layer_device(d, device_);
  return d;
}

MoeLayer Runtime::moe(const Checkpoint& ckpt, const std::string& prefix,
                      const MoeOptions& opt) const {
  std::vector<MoeInfo> blocks = ckpt.moe_blocks();
  auto it = std::find_if(blocks.begin(), blocks.end(),
                         [&](const MoeInfo& b) { return b.prefix == prefix; });
  if (it == blocks.end()) {
    std::string known;
    for (size_t i = 0; i < blocks.size() && i < 8; ++i)
      known += "\n  " + escape_untrusted(blocks[i].prefix, 200);
    if (blocks.size() > 8) known += "\n  ... (" + std::to_string(blocks.size() - 8) + " more)";
    throw Error("checkpoint " + escape_untrusted(ckpt.directory().string(), 400) +
                " has no MoE block '" + detail::name_text(prefix) + "'" +
                (known.empty() ? std::string(" (it has none)") : "; it has:" + known));
  }
  const MoeInfo& info = *it;
  MoeLayer layer;
  layer.num_experts_ = info.num_experts;
  layer.hidden_ = info.hidden;
  layer.top_k_ = opt.top_k > 0 ? opt.top_k : info.top_k;
  if (layer.top_k_ <= 0)
    throw Error("MoE block " + detail::name_text(prefix) +
                ": top-k is unknown (config.json has no " +
                "num_experts_per_tok); pass it (--top-k K)");
  if (layer.top_k_ > info.num_experts)
    throw Error("MoE block " + detail::name_text(prefix) + ": top-k " +
                std::to_string(layer.top_k_) + " exceeds the " + std::to_string(info.num_experts) +
                " experts");
  layer.renormalize_ = opt.renormalize.value_or(info.norm_topk_prob);
  std::string scoring = opt.scoring.empty() ? info.scoring : opt.scoring;
  if (scoring != "softmax" && scoring != "sigmoid")
    throw Error("MoE block " + detail::name_text(prefix) + ": router scoring " +
                detail::name_text(scoring) + " is not one of softmax, sigmoid");
  layer.sigmoid_ = scoring == "sigmoid";
  if (info.scheme == "dense")
    throw Error("MoE block " + detail::name_text(prefix) +
                ": its experts are not quantized; nibble runs GPTQ/AWQ "
                "experts only");
  if (info.w13_bits != info.w2_bits)
    throw Error("MoE block " + detail::name_text(prefix) + ": gate/up use " +
                std::to_string(info.w13_bits) + " bits but down uses " +
                std::to_string(info.w2_bits) + "; expected one width");

  // The router runs where x is: on the block's device.
  layer.router_ = make_dense(registry_, options_, device_, ckpt, info.router_prefix, "router");
  if (layer.router_->desc().N != info.num_experts || layer.router_->desc().K != info.hidden)
    throw Error("MoE block " + detail::name_text(prefix) + ": router " +
                detail::name_text(info.router_prefix) + " is [" +
                std::to_string(layer.router_->desc().N) + ", " +
                std::to_string(layer.router_->desc().K) + "], expected [" +
                std::to_string(info.num_experts) + ", " + std::to_string(info.hidden) + "]");

  const nibble_layer_desc d = describe_experts(info, layer.top_k_, prefix.c_str());
  Selection sel = registry_->select(d, options_.backend);
  if (!sel.passed_over.empty()) {
    std::string msg =
        detail::name_text(prefix) + " (experts) runs on " + sel.kernel->full_name() + " because:";
    for (const auto& p : sel.passed_over) msg += "\n  " + p;
    log(LogLevel::Warning, "core", msg);
  }
  ExpertFeed feed{&ckpt, prefix, {}};
  nibble_moe_source src{};
  src.struct_size = sizeof src;
  src.num_experts = info.num_experts;
  src.ctx = &feed;
  src.get_expert = &ExpertFeed::get;
  src.put_expert = &ExpertFeed::put;
  const nibble_weight_input in = sdk::host::experts_input(src);
  int threads = options_.threads > 0 ? options_.threads
                                     : int(std::max(1u, std::thread::hardware_concurrency()));
  layer.experts_ = prepare_first_that_accepts(registry_, sel, d, in, "experts", threads);
  return layer;
}

void MoeLayer::route(const DLTensor& x, std::vector<int32_t>& ids,
                     std::vector<float>& weights) const {
  route_on(x, ids, weights, nullptr);
}

void MoeLayer::route_on(const DLTensor& x, std::vector<int32_t>& ids, std::vector<float>& weights,
                        void* stream) const {
  const std::string& name = experts_->placement().layer;
  const DLDevice device = router_->device();
  int64_t M = check_activation(x, "input x", hidden_, name, device);
  const int E = num_experts_;
  std::vector<float> logits(size_t(M * E));
  int64_t lshape[2] = {M, E};
  if (device.device_type != kDLCPU) {
    // x stays where it is; the logits come back in its dtype.
    if (!sdk::is_float_dtype(x.dtype))
      throw Error("layer " + name + ": input x has dtype " + sdk::dtype_name(x.dtype) +
                  "; expected f32, bf16 or f16");
    const sdk::host::Device memory = router_->device_memory();
    const size_t elem = sdk::dtype_bytes(x.dtype);
    std::vector<char> back(logits.size() * elem);
    if (M > 0) {
      sdk::host::DeviceBuffer on_device = memory.alloc(back.size());
      DLTensor lt = sdk::host::matrix_view(on_device.get(), x.dtype, lshape, device);
      router_->forward(x, lt, nullptr, nullptr, stream);
      on_device.download(back.data(), back.size(), stream);
      memory.synchronize(stream);
    }
    for (size_t i = 0; i < logits.size(); ++i) logits[i] = sdk::load_float(back.data(), x.dtype, i);
  } else {
    // Router logits in f32, whatever the activation dtype.
    std::vector<float> xf;
    DLTensor xin = x;
    int64_t xshape[2] = {M, hidden_};
    if (!sdk::same_dtype(x.dtype, sdk::dtype_f32()) ||
        (x.strides && M > 1 && x.strides[0] != hidden_)) {
      xf.resize(size_t(M * hidden_));
      int64_t stride = x.strides && M > 1 ? x.strides[0] : hidden_;
      const char* base = static_cast<const char*>(x.data) + x.byte_offset;
      for (int64_t m = 0; m < M; ++m)
        for (int64_t c = 0; c < hidden_; ++c)
          xf[size_t(m * hidden_ + c)] = sdk::load_float(base, x.dtype, size_t(m * stride + c));
      xin = sdk::host::matrix_view(xf.data(), sdk::dtype_f32(), xshape);
    }
    DLTensor lt = sdk::host::matrix_view(logits.data(), sdk::dtype_f32(), lshape);
    router_->forward(xin, lt);
  }
  route_logits(logits.data(), M, E, top_k_, sigmoid_, renormalize_, ids, weights);
}

void MoeLayer::forward(const DLTensor& x, DLTensor& y) const { forward(x, y, nullptr); }

void MoeLayer::forward(const DLTensor& x, DLTensor& y, void* stream) const {
  std::vector<int32_t> ids;
  std::vector<float> w;
  route_on(x, ids, w, stream);
  int64_t M = x.shape[0];
  int64_t shape[2] = {M, top_k_};
  const DLDevice device = experts_->device();
  if (device.device_type == kDLCPU) {
    DLTensor ti = sdk::host::matrix_view(ids.data(), sdk::dtype_i32(), shape);
    DLTensor tw = sdk::host::matrix_view(w.data(), sdk::dtype_f32(), shape);
    experts_->forward(x, y, &ti, &tw);
    return;
  }
  if (M == 0) return;
  const sdk::host::Device memory = experts_->device_memory();
  sdk::host::DeviceBuffer ids_on_device = memory.alloc(ids.size() * sizeof(int32_t));
  sdk::host::DeviceBuffer weights_on_device = memory.alloc(w.size() * sizeof(float));
  ids_on_device.upload(ids.data(), ids.size() * sizeof(int32_t), stream);
  weights_on_device.upload(w.data(), w.size() * sizeof(float), stream);
  DLTensor ti = sdk::host::matrix_view(ids_on_device.get(), sdk::dtype_i32(), shape, device);
  DLTensor tw = sdk::host::matrix_view(weights_on_device.get(), sdk::dtype_f32(), shape, device);
  try {
    experts_->forward(x, y, &ti, &tw, stream);
  } catch (...) {
    memory.synchronize(stream);  // the uploads read ids and w: wait before they go
    throw;
  }
  // The routing buffers (host and device) live until the experts are done with them.
  memory.synchronize(stream);
}

void MoeLayer::forward_routed(const DLTensor& x, const DLTensor& topk_ids,
                              const DLTensor& topk_weights, DLTensor& y) const {
  forward_routed(x, topk_ids, topk_weights, y, nullptr);
}

void MoeLayer::forward_routed(const DLTensor& x, const DLTensor& topk_ids,
                              const DLTensor& topk_weights, DLTensor& y, void* stream) const {
  const std::string& name = experts_->placement().layer;
  int64_t M = check_activation(x, "input x", hidden_, name, experts_->device());
  for (const DLTensor* t : {&topk_ids, &topk_weights}) {
    const char* what = t == &topk_ids ? "topk_ids" : "topk_weights";
    if (t->ndim != 2 || !t->shape || t->shape[0] != M || t->shape[1] != top_k_)
      throw Error("layer " + name + ": " + what + " must be [" + std::to_string(M) + ", " +
                  std::to_string(top_k_) + "]");
  }
  experts_->forward(x, y, &topk_ids, &topk_weights, stream);
}

DLDevice MoeLayer::device() const { return experts_->device(); }
sdk::host::Device MoeLayer::device_memory() const { return experts_->device_memory(); }

std::vector<Placement> MoeLayer::placements() const {
  return {router_->placement(), experts_->placement()};
}

size_t MoeLayer::prepared_bytes() const { return experts_->prepared_bytes(); }

}  // namespace nibble
