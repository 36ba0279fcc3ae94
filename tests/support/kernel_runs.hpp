// Test support: run one quantized linear or MoE case through a plugin kernel (via the C ABI) and
// compare it with the float64 reference — poisoned output, every element checked written, the
// relative error against the kernel's own declared bound for the activation dtype.
#pragma once

#include <nibble/sdk/plugin.h>
#include <nibble/sdk/numeric.hpp>

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "plugin_harness.hpp"
#include "reference.hpp"

namespace nibble::test {

/// The bound a kernel declares for activations of `dtype`.
inline double declared_bound(const nibble_kernel* k, DLDataType dtype) {
  if (dtype.code == kDLBfloat) return k->error_bound_bf16;
  return dtype.bits == 16 ? k->error_bound_f16 : k->error_bound_f32;
}

/// A short name of an activation dtype for messages.
inline std::string act_name(DLDataType d) { return sdk::dtype_name(d); }

/// The result of a prepare that may fail.
struct PrepareResult {
  nibble_status status = NIBBLE_OK;
  std::string message;
  std::unique_ptr<PreparedLayer> layer;
};

/// Prepare a quantized linear weight, keeping the status and message on failure.
inline PrepareResult try_prepare_linear(const nibble_kernel* k, const nibble_layer_desc& d,
                                        const CanonicalWeight& w) {
  PrepareResult r;
  r.status = sdk::host::status_of([&] { r.layer = prepare_linear(k, d, w); }, &r.message);
  return r;
}

/// Prepare MoE experts, keeping the status and message on failure.
inline PrepareResult try_prepare_moe(const nibble_kernel* k, const nibble_layer_desc& d,
                                     const TestExperts& ex) {
  PrepareResult r;
  r.status = sdk::host::status_of([&] { r.layer = prepare_moe(k, d, ex); }, &r.message);
  return r;
}

/// What one forward produced, compared with the reference.
struct CaseResult {
  nibble_status status = NIBBLE_OK;
  std::string message;
  double rel_error = 0;
  size_t not_finite = 0;  ///< elements still poisoned (or NaN/inf)
  std::vector<double> y;
};

/// Run x through a prepared linear layer into a NaN-poisoned y and compare with `ref`.
inline CaseResult run_linear(const PreparedLayer& layer, const Activations& x, int64_t N,
                             const std::vector<double>& ref, int threads = 2) {
  auto xt = tensor_of(x);
  Tensor2D yt(x.M, N, x.dtype);
  poison(yt.bytes, x.dtype);
  CaseResult r;
  r.status = layer.forward(&xt->t, &yt.t, nullptr, nullptr, threads, &r.message);
  r.y = read_output(yt.bytes, x.dtype, size_t(x.M * N), &r.not_finite);
  if (r.status == NIBBLE_OK) r.rel_error = relative_error(r.y, ref);
  return r;
}

/// Routing for an MoE test: ids [M][top_k] (-1 = no expert) and weights already rounded to
/// `weight_dtype`, as the exact doubles the kernel will read.
struct Routing {
  int64_t M = 0;
  int top_k = 0;
  std::vector<int32_t> ids;
  std::vector<double> weights;
  DLDataType weight_dtype = sdk::dtype_f32();
};

/// Random routing: distinct experts per token drawn from [0, experts_used); every slot with
/// probability `drop` becomes -1; `renormalize` makes each token's weights sum to 1 (before
/// rounding), else they are raw sigmoid-like scores in (0, 1).
inline Routing random_routing(int64_t M, int top_k, int experts_used, double drop, bool renormalize,
                              DLDataType weight_dtype, uint32_t seed) {
  std::mt19937 rng(seed);
  Routing r;
  r.M = M;
  r.top_k = top_k;
  r.weight_dtype = weight_dtype;
  std::uniform_real_distribution<double> u(0.05, 1.0);
  std::vector<int32_t> pool(static_cast<size_t>(experts_used));
  for (int e = 0; e < experts_used; ++e) pool[size_t(e)] = e;
  for (int64_t m = 0; m < M; ++m) {
    std::shuffle(pool.begin(), pool.end(), rng);
    std::vector<double> w(static_cast<size_t>(top_k));
    double sum = 0;
    for (int j = 0; j < top_k; ++j) sum += (w[size_t(j)] = u(rng));
    for (int j = 0; j < top_k; ++j) {
      const bool dropped = std::uniform_real_distribution<double>(0, 1)(rng) < drop;
      r.ids.push_back(dropped ? -1 : pool[size_t(j) % pool.size()]);
      double v = renormalize ? w[size_t(j)] / sum : w[size_t(j)];
      uint8_t buf[4];
      sdk::store_float(buf, weight_dtype, 0, float(v));
      r.weights.push_back(sdk::load_float(buf, weight_dtype, 0));
    }
  }
  return r;
}

/// Run x through a prepared MoE layer with `routing` (ids as int32 or int64) into a poisoned y
/// and compare with `ref`.
inline CaseResult run_moe(const PreparedLayer& layer, const Activations& x, const Routing& routing,
                          bool ids_int64, const std::vector<double>& ref, int threads = 2) {
  auto xt = tensor_of(x);
  Tensor2D yt(x.M, x.K, x.dtype);
  poison(yt.bytes, x.dtype);
  Tensor2D ids(routing.M, routing.top_k, ids_int64 ? sdk::dtype_i64() : sdk::dtype_i32());
  Tensor2D wts(routing.M, routing.top_k, routing.weight_dtype);
  for (size_t i = 0; i < routing.ids.size(); ++i) {
    if (ids_int64)
      reinterpret_cast<int64_t*>(ids.bytes.data())[i] = routing.ids[i];
    else
      reinterpret_cast<int32_t*>(ids.bytes.data())[i] = routing.ids[i];
    sdk::store_float(wts.bytes.data(), routing.weight_dtype, i, float(routing.weights[i]));
  }
  CaseResult r;
  r.status = layer.forward(&xt->t, &yt.t, &ids.t, &wts.t, threads, &r.message);
  r.y = read_output(yt.bytes, x.dtype, size_t(x.M * x.K), &r.not_finite);
  if (r.status == NIBBLE_OK) r.rel_error = relative_error(r.y, ref);
  return r;
}

}  // namespace nibble::test
