// GPTQ (AutoGPTQ / GPTQModel), checkpoint_format "gptq" (v1) and "gptq_v2", 4 and 8 bits. qweight
// int32 [K*bits/32, N] packed along K; qzeros int32 [G, N*bits/32] packed along N; value i of a
// word sits at bits [bits*i, bits*i + bits) (docs/formats.md#gptq-packing). v1 stores zero - 1 and
// is decoded unmasked (stored 0xF -> 16, docs/formats.md#gptq-v1-zero-points); v2 stores the zero
// itself.
#include <nibble/checkpoint_scheme.hpp>

#include "group_rows.hpp"
#include "tensor_checks.hpp"
#include "text/name_text.hpp"

namespace nibble::schemes {

namespace {

// K and N are each stated by several tensors. When two of them agree and the third differs, the
// third is the one to name (with every shape and bits), rather than whichever is checked first.
void blame_outvoted(const LayerTensors& layer, const SchemeParams& p, const LayerShape& s,
                    int64_t pack, GroupRows rows) {
  const TensorView& qweight = *layer.qweight;
  const TensorView& qzeros = *layer.qzeros;
  const TensorView& scales = *layer.scales;
  const int64_t G = scales.shape[0];
  const TensorView* g_idx = layer.g_idx;
  // A shard's scales rows say nothing about its K, so only a checkpoint layer's vote.
  if (rows == GroupRows::FromGroupSize && g_idx && g_idx->shape.size() == 1 && p.group_size > 0) {
    const int64_t K_g = g_idx->shape[0];
    if (K_g != s.K && K_g > 0 && groups_for(K_g, p.group_size) == G &&
        groups_for(s.K, p.group_size) != G) {
      throw Error(fmt::format(
          "{} has shape {}, which packs K = {} input channels at bits={} ({} per int32), but "
          "g_idx {} and scales {} (group_size = {}) both say K = {}",
          where(qweight), qweight.shape_string(), s.K, p.bits, pack, g_idx->shape_string(),
          scales.shape_string(), p.group_size, K_g));
    }
  }
  const int64_t N_s = scales.shape[1], N_z = qzeros.shape[1] * pack;
  if (N_s == N_z && N_s != s.N) {
    throw Error(
        fmt::format("{} has shape {}, which gives N = {} output channels, but scales {} and qzeros "
                    "{} ({} zeros per int32 at bits={}) both say N = {}",
                    where(qweight), qweight.shape_string(), s.N, scales.shape_string(),
                    qzeros.shape_string(), pack, p.bits, N_s));
  }
}

class GptqScheme final : public Scheme {
 public:
  explicit GptqScheme(SchemeKind kind) : kind_(kind) {}
  SchemeKind kind() const override { return kind_; }

  LayerShape check(const LayerTensors& layer, const SchemeParams& p) const override {
    return check_rows(layer, p, GroupRows::FromGroupSize);
  }

  CanonicalWeight decode(const LayerTensors& layer, const SchemeParams& p) const override {
    return decode_rows(layer, p, GroupRows::FromGroupSize);
  }

  LayerShape check_rows(const LayerTensors& layer, const SchemeParams& p, GroupRows rows) const {
    const std::string_view name = scheme_name(kind_);
    if (p.bits != 4 && p.bits != 8) {
      throw Error(fmt::format("layer {}: bits={} is not supported (nibble supports 4 and 8)",
                              layer_name(layer), p.bits));
    }
    const int64_t pack = 32 / p.bits;
    const TensorView& qweight = require_tensor(layer.qweight, layer, "qweight", name);
    const TensorView& qzeros = require_tensor(layer.qzeros, layer, "qzeros", name);
    const TensorView& scales = require_tensor(layer.scales, layer, "scales", name);
    expect_packed_tensors(qweight, qzeros, scales);
    LayerShape s;
    s.K = qweight.shape[0] * pack;
    s.N = qweight.shape[1];
    expect_nonempty(qweight, s.K, s.N);
    blame_outvoted(layer, p, s, pack, rows);
    if (layer.g_idx) {
      expect_dtype(*layer.g_idx, {DType::I32});
      expect_shape(*layer.g_idx, {s.K},
                   fmt::format("qweight {} packs K = {} input channels at bits={}",
                               qweight.shape_string(), s.K, p.bits));
    }
    if (s.N % pack != 0) {
      throw Error(
          fmt::format("{} has N = {} output channels; GPTQ qzeros packs {} per int32 at "
                      "bits={}, so N must be a multiple of {}",
                      where(qweight), s.N, pack, p.bits, pack));
    }
    s.num_groups = groups_for(s.K, p.group_size);
    std::string why = fmt::format("K = {} from qweight {} at bits={}, group_size = {}", s.K,
                                  qweight.shape_string(), p.bits, p.group_size);
    if (rows == GroupRows::FromScales && layer.g_idx && scales.shape[0] >= 1) {
      // A row-parallel shard: g_idx picks its groups among the rows given (checked at decode).
      s.num_groups = scales.shape[0];
      why = fmt::format("N = {} from qweight {}, and {} group rows from scales (g_idx picks them)",
                        s.N, qweight.shape_string(), s.num_groups);
    }
    expect_shape(scales, {s.num_groups, s.N}, why);
    expect_shape(qzeros, {s.num_groups, s.N / pack},
                 why + fmt::format(", {} zeros per int32", pack));
    check_bias(layer, s.N);
    s.bytes = layer_bytes(layer);
    return s;
  }

  CanonicalWeight decode_rows(const LayerTensors& layer, const SchemeParams& p,
                              GroupRows rows) const {
    const LayerShape s = check_rows(layer, p, rows);
    const int bits = p.bits;
    const int64_t pack = 32 / bits;
    const uint32_t mask = (1u << bits) - 1;
    CanonicalWeight w;
    w.bits = bits;
    w.group_size = p.group_size;
    w.K = s.K;
    w.N = s.N;
    w.num_groups = s.num_groups;
    const TensorView& qweight = *layer.qweight;
    w.q.resize(size_t(s.N * s.K));
    for (int64_t r = 0; r < qweight.shape[0]; ++r) {
      for (int64_t n = 0; n < s.N; ++n) {
        uint32_t word = uint32_t(qweight.i32(size_t(r * s.N + n)));
        uint8_t* dst = &w.q[size_t(n * s.K + r * pack)];
        for (int64_t i = 0; i < pack; ++i) dst[i] = uint8_t((word >> (bits * i)) & mask);
      }
    }
    const TensorView& qzeros = *layer.qzeros;
    const int64_t zcols = s.N / pack;
    w.zeros.resize(size_t(s.num_groups * s.N));
    for (int64_t g = 0; g < s.num_groups; ++g) {
      for (int64_t c = 0; c < zcols; ++c) {
        uint32_t word = uint32_t(qzeros.i32(size_t(g * zcols + c)));
        for (int64_t i = 0; i < pack; ++i) {
          uint32_t stored = (word >> (bits * i)) & mask;
          uint32_t zero = kind_ == SchemeKind::GptqV1 ? stored + 1 : stored;
          if (zero > 255) {
            throw Error(
                fmt::format("{}: stored zero {:#x} at group {}, column {} decodes (v1, "
                            "stored + 1) to {}, which does not fit the 8-bit canonical "
                            "zero point",
                            where(qzeros), stored, g, c * pack + i, zero));
          }
          w.zeros[size_t(g * s.N + c * pack + i)] = uint8_t(zero);
        }
      }
    }
    w.scales = raw_bytes(*layer.scales);
    w.scales_dtype = to_dlpack(layer.scales->dtype);
    if (layer.g_idx) {
      std::vector<int32_t> g_idx(size_t(s.K));
      for (int64_t k = 0; k < s.K; ++k) {
        int32_t g = layer.g_idx->i32(size_t(k));
        if (g < 0 || g >= s.num_groups) {
          throw Error(fmt::format("{}: g_idx[{}] = {} is outside [0, {}) (group_size = {})",
                                  where(*layer.g_idx), k, g, s.num_groups, p.group_size));
        }
        g_idx[size_t(k)] = g;
      }
      // Identity grouping (no act-order, or static groups) costs nothing: drop it, and with it
      // any rows past the ones it uses (a shard given more group rows than its K spans).
      if (!is_identity_grouping(g_idx, p.group_size)) {
        w.g_idx = std::move(g_idx);
      } else if (const int64_t used = groups_for(s.K, p.group_size); used < s.num_groups) {
        w.num_groups = used;
        w.zeros.resize(size_t(used * s.N));
        w.scales.resize(size_t(used * s.N) * dtype_size(layer.scales->dtype));
      }
    }
    decode_bias(layer, s.N, w);
    return w;
  }

  std::map<std::string, OwnedTensor> encode(const CanonicalWeight& w) const override {
    const std::string what =
        fmt::format("encoding {} weight K={} N={}", scheme_name(kind_), w.K, w.N);
    validate(w, what);
    const int bits = w.bits;
    const int64_t pack = 32 / bits;
    if (w.K % pack != 0) {
      throw Error(
          fmt::format("{}: GPTQ packs {} input channels per int32 at bits={}, so K must "
                      "be a multiple of {}",
                      what, pack, bits, pack));
    }
    if (w.N % pack != 0) {
      throw Error(
          fmt::format("{}: GPTQ qzeros packs {} output channels per int32 at bits={}, so "
                      "N must be a multiple of {}",
                      what, pack, bits, pack));
    }
    const uint32_t mask = (1u << bits) - 1;
    std::map<std::string, OwnedTensor> out;
    OwnedTensor qweight = OwnedTensor::zeros(DType::I32, {w.K / pack, w.N});
    for (int64_t r = 0; r < w.K / pack; ++r) {
      for (int64_t n = 0; n < w.N; ++n) {
        uint32_t word = 0;
        for (int64_t i = 0; i < pack; ++i)
          word |= uint32_t(w.q[size_t(n * w.K + r * pack + i)]) << (bits * i);
        qweight.set_i32(size_t(r * w.N + n), int32_t(word));
      }
    }
    OwnedTensor qzeros = OwnedTensor::zeros(DType::I32, {w.num_groups, w.N / pack});
    for (int64_t g = 0; g < w.num_groups; ++g) {
      for (int64_t c = 0; c < w.N / pack; ++c) {
        uint32_t word = 0;
        for (int64_t i = 0; i < pack; ++i) {
          int64_t n = c * pack + i;
          int zero = w.zeros[size_t(g * w.N + n)];
          int stored = kind_ == SchemeKind::GptqV1 ? zero - 1 : zero;
          if (stored < 0 || uint32_t(stored) > mask) {
            throw Error(fmt::format(
                "{}: zero point {} at group {}, column {} cannot be stored in {} (stored value "
                "{} must lie in [0, {}]){}",
                what, zero, g, n, scheme_name(kind_), stored, mask,
                kind_ == SchemeKind::GptqV1 ? "; v1 cannot hold zero 0, write gptq_v2" : ""));
          }
          word |= uint32_t(stored) << (bits * i);
        }
        qzeros.set_i32(size_t(g * (w.N / pack) + c), int32_t(word));
      }
    }
    OwnedTensor g_idx = OwnedTensor::zeros(DType::I32, {w.K});
    for (int64_t k = 0; k < w.K; ++k) g_idx.set_i32(size_t(k), int32_t(w.group_of(k)));
    out["qweight"] = std::move(qweight);
    out["qzeros"] = std::move(qzeros);
    out["scales"] = float_tensor(w.scales, w.scales_dtype, {w.num_groups, w.N});
    out["g_idx"] = std::move(g_idx);
    if (!w.bias.empty()) out["bias"] = float_tensor(w.bias, w.bias_dtype, {w.N});
    return out;
  }

 private:
  SchemeKind kind_;
};

}  // namespace

static const GptqScheme& gptq_instance(SchemeKind kind) {
  static const GptqScheme v1(SchemeKind::GptqV1);
  static const GptqScheme v2(SchemeKind::GptqV2);
  return kind == SchemeKind::GptqV1 ? v1 : v2;
}

const Scheme& gptq_scheme(SchemeKind kind) { return gptq_instance(kind); }

LayerShape check_gptq(SchemeKind kind, const LayerTensors& layer, const SchemeParams& params,
                      GroupRows rows) {
  return gptq_instance(kind).check_rows(layer, params, rows);
}

CanonicalWeight decode_gptq(SchemeKind kind, const LayerTensors& layer, const SchemeParams& params,
                            GroupRows rows) {
  return gptq_instance(kind).decode_rows(layer, params, rows);
}

}  // namespace nibble::schemes

namespace nibble {

std::vector<int64_t> gptq_stored_zero_histogram(const TensorView& qzeros, int bits, int64_t N) {
  const int64_t pack = 32 / bits;
  const uint32_t mask = (1u << bits) - 1;
  std::vector<int64_t> hist(size_t(mask) + 1, 0);
  const int64_t words = qzeros.numel();
  const int64_t zcols = N / pack;
  for (int64_t i = 0; i < words; ++i) {
    uint32_t word = uint32_t(qzeros.i32(size_t(i)));
    // Only fields holding a real column count (N is a multiple of pack, checked before).
    int64_t fields = std::min<int64_t>(pack, N - (i % zcols) * pack);
    for (int64_t f = 0; f < fields; ++f) ++hist[(word >> (bits * f)) & mask];
  }
  return hist;
}

SchemeKind resolve_gptq_scheme(const LayerTensors& layer, const SchemeParams& p,
                               SchemeKind labelled, std::vector<std::string>& warnings) {
  if (!p.sym || !layer.qzeros || !layer.qweight || labelled == SchemeKind::AwqGemm) return labelled;
  const int64_t N = layer.qweight->shape.size() == 2 ? layer.qweight->shape[1] : 0;
  if (N <= 0) return labelled;
  auto hist = gptq_stored_zero_histogram(*layer.qzeros, p.bits, N);
  const int64_t half = int64_t(1) << (p.bits - 1);
  int64_t total = 0;
  for (int64_t c : hist) total += c;
  const int64_t v1_style = hist[size_t(half - 1)];
  const int64_t v2_style = hist[size_t(half)];
  const int64_t other = total - v1_style - v2_style;
  const std::string q = schemes::where(*layer.qzeros);
  if (other > 0) {
    size_t example = 0;
    for (size_t v = 0; v < hist.size(); ++v) {
      if (hist[v] && int64_t(v) != half - 1 && int64_t(v) != half) {
        example = v;
        break;
      }
    }
    throw Error(
        fmt::format("{}: the config says sym: true, so every stored zero should be {} (v1) "
                    "or {} (v2), but {} of {} are not (e.g. {})",
                    q, half - 1, half, other, total, example));
  }
  if (v1_style > 0 && v2_style > 0) {
    throw Error(
        fmt::format("{}: symmetric stored zeros mix the v1 convention ({} x {}) and the v2 "
                    "convention ({} x {}); cannot tell how to decode this layer",
                    q, v1_style, half - 1, v2_style, half));
  }
  if (labelled == SchemeKind::GptqV1 && v2_style == total && total > 0) {
    warnings.push_back(
        fmt::format("{}: checkpoint_format says gptq (v1) but every symmetric stored "
                    "zero is {} (the v2 convention; v1 would store {}): loading "
                    "layer {} as gptq_v2 (docs/formats.md#v1-or-v2)",
                    q, half, half - 1, detail::name_text(layer.prefix)));
    return SchemeKind::GptqV2;
  }
  if (labelled == SchemeKind::GptqV2 && v1_style == total && total > 0) {
    throw Error(
        fmt::format("{}: checkpoint_format says gptq_v2 but every symmetric stored zero is "
                    "{} (the v1 convention; v2 stores {}): the label looks wrong, refusing "
                    "to guess",
                    q, half - 1, half));
  }
  return labelled;
}

}  // namespace nibble
