// AWQ GEMM (AutoAWQ WQLinear_GEMM), 4 bits. qweight int32 [K, N/8] and qzeros int32 [G, N/8] are
// packed along N in the interleaved order: logical column 8j + i sits in nibble REVERSE[i] of word
// j (docs/formats.md#awq-gemm-packing). Zero points are stored as they are; there is no g_idx.
#include <nibble/checkpoint_scheme.hpp>

#include "tensor_checks.hpp"

namespace nibble::schemes {

namespace {

// Nibble position holding logical column offset i (AutoAWQ AWQ_REVERSE_ORDER).
constexpr int kReverse[8] = {0, 4, 1, 5, 2, 6, 3, 7};

class AwqGemmScheme final : public Scheme {
 public:
  SchemeKind kind() const override { return SchemeKind::AwqGemm; }

  LayerShape check(const LayerTensors& layer, const SchemeParams& p) const override {
    if (p.bits != 4) {
      throw Error(fmt::format("layer {}: bits={} is not supported for AWQ GEMM (supported: 4)",
                              layer_name(layer), p.bits));
    }
    const TensorView& qweight = require_tensor(layer.qweight, layer, "qweight", "awq_gemm");
    const TensorView& qzeros = require_tensor(layer.qzeros, layer, "qzeros", "awq_gemm");
    const TensorView& scales = require_tensor(layer.scales, layer, "scales", "awq_gemm");
    if (layer.g_idx) {
      throw Error(
          fmt::format("{}: AWQ GEMM has no act-order, yet the layer has a g_idx tensor; "
                      "is this a GPTQ checkpoint labelled awq?",
                      where(*layer.g_idx)));
    }
    expect_packed_tensors(qweight, qzeros, scales);
    LayerShape s;
    s.K = qweight.shape[0];
    s.N = scales.shape[1];
    // N is stated three times; when qweight and qzeros agree against scales, scales is wrong.
    if (qweight.shape[1] == qzeros.shape[1] && qweight.shape[1] * 8 != s.N) {
      throw Error(
          fmt::format("{} has shape {}, which gives N = {} output channels, but qweight {} and "
                      "qzeros {} (8 columns per int32) both say N = {}",
                      where(scales), scales.shape_string(), s.N, qweight.shape_string(),
                      qzeros.shape_string(), qweight.shape[1] * 8));
    }
    expect_nonempty(qweight, s.K, s.N);
    if (s.N % 8 != 0) {
      throw Error(
          fmt::format("{} has N = {} output channels; AWQ GEMM packs 8 per int32, so N "
                      "must be a multiple of 8",
                      where(scales), s.N));
    }
    s.num_groups = groups_for(s.K, p.group_size);
    std::string why =
        fmt::format("K = {} rows of qweight, N = {} columns of scales, group_size = {}", s.K, s.N,
                    p.group_size);
    expect_shape(qweight, {s.K, s.N / 8}, why + ", 8 columns per int32");
    expect_shape(scales, {s.num_groups, s.N}, why);
    expect_shape(qzeros, {s.num_groups, s.N / 8}, why + ", 8 zeros per int32");
    check_bias(layer, s.N);
    s.bytes = layer_bytes(layer);
    return s;
  }

  CanonicalWeight decode(const LayerTensors& layer, const SchemeParams& p) const override {
    const LayerShape s = check(layer, p);
    CanonicalWeight w;
    w.bits = 4;
    w.group_size = p.group_size;
    w.K = s.K;
    w.N = s.N;
    w.num_groups = s.num_groups;
    const int64_t words = s.N / 8;
    w.q.resize(size_t(s.N * s.K));
    for (int64_t k = 0; k < s.K; ++k) {
      for (int64_t j = 0; j < words; ++j) {
        uint32_t word = uint32_t(layer.qweight->i32(size_t(k * words + j)));
        for (int i = 0; i < 8; ++i)
          w.q[size_t((8 * j + i) * s.K + k)] = uint8_t((word >> (4 * kReverse[i])) & 0xF);
      }
    }
    w.zeros.resize(size_t(s.num_groups * s.N));
    for (int64_t g = 0; g < s.num_groups; ++g) {
      for (int64_t j = 0; j < words; ++j) {
        uint32_t word = uint32_t(layer.qzeros->i32(size_t(g * words + j)));
        for (int i = 0; i < 8; ++i)
          w.zeros[size_t(g * s.N + 8 * j + i)] = uint8_t((word >> (4 * kReverse[i])) & 0xF);
      }
    }
    w.scales = raw_bytes(*layer.scales);
    w.scales_dtype = to_dlpack(layer.scales->dtype);
    decode_bias(layer, s.N, w);
    return w;
  }

  std::map<std::string, OwnedTensor> encode(const CanonicalWeight& w) const override {
    const std::string what = fmt::format("encoding awq_gemm weight K={} N={}", w.K, w.N);
    validate(w, what);
    if (w.bits != 4) throw Error(fmt::format("{}: bits={} (AWQ GEMM supports 4)", what, w.bits));
    if (!w.g_idx.empty()) {
      throw Error(
          fmt::format("{}: the weight has act-order (a non-identity g_idx), which AWQ "
                      "GEMM cannot store",
                      what));
    }
    if (w.N % 8 != 0) {
      throw Error(
          fmt::format("{}: AWQ GEMM packs 8 output channels per int32, so N must be a "
                      "multiple of 8",
                      what));
    }
    const int64_t words = w.N / 8;
    auto pack = [&](const uint8_t* values, int64_t stride) {
      uint32_t word = 0;
      for (int i = 0; i < 8; ++i) word |= uint32_t(values[i * stride]) << (4 * kReverse[i]);
      return int32_t(word);
    };
    OwnedTensor qweight = OwnedTensor::zeros(DType::I32, {w.K, words});
    for (int64_t k = 0; k < w.K; ++k) {
      for (int64_t j = 0; j < words; ++j)
        qweight.set_i32(size_t(k * words + j), pack(&w.q[size_t(8 * j * w.K + k)], w.K));
    }
    OwnedTensor qzeros = OwnedTensor::zeros(DType::I32, {w.num_groups, words});
    for (size_t i = 0; i < w.zeros.size(); ++i) {
      if (w.zeros[i] > 15) {
        throw Error(
            fmt::format("{}: zero point {} at group {}, column {} does not fit AWQ's 4-bit "
                        "zeros",
                        what, w.zeros[i], int64_t(i) / w.N, int64_t(i) % w.N));
      }
    }
    for (int64_t g = 0; g < w.num_groups; ++g) {
      for (int64_t j = 0; j < words; ++j)
        qzeros.set_i32(size_t(g * words + j), pack(&w.zeros[size_t(g * w.N + 8 * j)], 1));
    }
    std::map<std::string, OwnedTensor> out;
    out["qweight"] = std::move(qweight);
    out["qzeros"] = std::move(qzeros);
    out["scales"] = float_tensor(w.scales, w.scales_dtype, {w.num_groups, w.N});
    if (!w.bias.empty()) out["bias"] = float_tensor(w.bias, w.bias_dtype, {w.N});
    return out;
  }
};

}  // namespace

const Scheme& awq_gemm_scheme() {
  static const AwqGemmScheme scheme;
  return scheme;
}

}  // namespace nibble::schemes
