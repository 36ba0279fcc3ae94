// Helpers for tests of layers built from an engine's tensors: DLTensors lent over checkpoint
// views or owned copies, a layer's tensors gathered into QuantTensors, a checkpoint's format.
#pragma once

#include <nibble/checkpoint.hpp>
#include <nibble/layer_tensors.hpp>
#include <nibble/safetensors.hpp>

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace nibble::test {

/// One DLTensor an engine would hold: its own shape array, over borrowed or owned bytes.
struct Lent {
  std::vector<int64_t> shape;
  std::vector<std::byte> owned;
  DLTensor t{};

  /// A tensor over `bytes` (borrowed) with `dtype` and `shape`.
  static std::unique_ptr<Lent> over(const void* bytes, DType dtype, std::vector<int64_t> shape) {
    auto l = std::make_unique<Lent>();
    l->shape = std::move(shape);
    l->t.data = const_cast<void*>(bytes);
    l->t.device = {kDLCPU, 0};
    l->t.ndim = int32_t(l->shape.size());
    l->t.dtype = to_dlpack(dtype);
    l->t.shape = l->shape.data();
    return l;
  }
  /// A tensor over a checkpoint view's bytes, borrowed, or copied when `copy`.
  static std::unique_ptr<Lent> of(const TensorView& v, bool copy = false) {
    auto l = over(v.data, v.dtype, v.shape);
    if (copy) {
      l->owned.assign(v.data, v.data + v.nbytes);
      l->t.data = l->owned.data();
    }
    return l;
  }
  /// A copy of an owned tensor.
  static std::unique_ptr<Lent> of(const OwnedTensor& o) {
    auto l = over(nullptr, o.dtype, o.shape);
    l->owned = o.data;
    l->t.data = l->owned.data();
    return l;
  }
};

/// A layer's tensors by suffix ("qweight", "qzeros", "scales", "g_idx", "bias").
using LentLayer = std::map<std::string, std::unique_ptr<Lent>>;

/// The layer `prefix` of `ckpt`'s store, lent (copied when `copy`).
inline LentLayer lend_layer(const Checkpoint& ckpt, const std::string& prefix, bool copy = false) {
  LentLayer l;
  for (const char* s : {"qweight", "qzeros", "scales", "g_idx", "bias"})
    if (const TensorView* v = ckpt.tensors().find(prefix + "." + s)) l[s] = Lent::of(*v, copy);
  return l;
}

/// The QuantTensors over a lent layer.
inline QuantTensors quant_tensors(const LentLayer& l) {
  auto get = [&](const char* s) { return l.count(s) ? &l.at(s)->t : nullptr; };
  QuantTensors t;
  t.qweight = get("qweight");
  t.qzeros = get("qzeros");
  t.scales = get("scales");
  t.g_idx = get("g_idx");
  t.bias = get("bias");
  return t;
}

/// The QuantFormat a checkpoint's quantization config gives its layers.
inline QuantFormat format_of(const Checkpoint& ckpt) {
  const QuantConfig& c = *ckpt.quant_config();
  QuantFormat f;
  f.method = std::string(quant_method_name(c.method));
  f.checkpoint_format = c.checkpoint_format;
  f.bits = c.bits;
  f.group_size = c.group_size;
  f.sym = c.sym;
  return f;
}

/// Whether two canonical weights are the same bit for bit.
inline bool same_weight(const CanonicalWeight& a, const CanonicalWeight& b) {
  return a.bits == b.bits && a.group_size == b.group_size && a.K == b.K && a.N == b.N &&
         a.num_groups == b.num_groups && a.q == b.q && a.zeros == b.zeros && a.scales == b.scales &&
         sdk::same_dtype(a.scales_dtype, b.scales_dtype) && a.g_idx == b.g_idx &&
         a.bias == b.bias && (a.bias.empty() || sdk::same_dtype(a.bias_dtype, b.bias_dtype));
}

}  // namespace nibble::test
