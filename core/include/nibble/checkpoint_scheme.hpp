// Schemes: how one quantization format stores a linear layer on disk, and the exact translation
// between those tensors and the canonical weight (decode and encode, bit-exact both ways).
#pragma once

#include <nibble/canonical_weight.hpp>
#include <nibble/export.hpp>
#include <nibble/safetensors.hpp>

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace nibble {

/// The on-disk formats nibble decodes (docs/formats.md#how-the-tensors-are-packed).
enum class SchemeKind {
  GptqV1,  ///< GPTQ checkpoint_format "gptq": stored zero = zero - 1, decoded unmasked
  GptqV2,  ///< GPTQ checkpoint_format "gptq_v2": stored zero = zero
  AwqGemm  ///< AWQ version "gemm": packed along N in the interleaved nibble order
};

/// "gptq_v1", "gptq_v2" or "awq_gemm".
NIBBLE_API std::string_view scheme_name(SchemeKind kind);

/// The tensors of one quantized layer as found in a checkpoint (nullptr: absent).
struct LayerTensors {
  std::string prefix;  ///< e.g. "model.layers.0.self_attn.q_proj"
  const TensorView* qweight = nullptr;
  const TensorView* qzeros = nullptr;
  const TensorView* scales = nullptr;
  const TensorView* g_idx = nullptr;
  const TensorView* bias = nullptr;
};

/// What the configuration says about one layer (after modules_to_not_convert and dynamic).
struct SchemeParams {
  int bits = 4;
  int group_size = 128;  ///< > 0 or -1
  bool sym = true;
};

/// Sizes a scheme reads off a layer's tensor shapes, after checking them.
struct LayerShape {
  int64_t K = 0;
  int64_t N = 0;
  int64_t num_groups = 0;
  uint64_t bytes = 0;  ///< bytes on disk of every tensor of the layer
};

/// One on-disk format. Implementations: core/src/schemes/{gptq,awq}.cpp.
class NIBBLE_API Scheme {
 public:
  virtual ~Scheme() = default;
  /// Which format this is.
  virtual SchemeKind kind() const = 0;
  /// Check presence, dtypes and shapes of the tensors against `params` without reading values;
  /// throws nibble::Error naming the file, the tensor and expected versus found.
  virtual LayerShape check(const LayerTensors& tensors, const SchemeParams& params) const = 0;
  /// Decode into canonical form (check() included; values such as g_idx validated). An
  /// identity g_idx is dropped (empty) because it costs nothing.
  virtual CanonicalWeight decode(const LayerTensors& tensors, const SchemeParams& params) const = 0;
  /// Encode into on-disk tensors keyed by suffix ("qweight", "qzeros", "scales", "g_idx",
  /// "bias"); throws nibble::Error when the weight cannot be stored in this format (packing
  /// constraints, zero points out of range, act-order in AWQ).
  virtual std::map<std::string, OwnedTensor> encode(const CanonicalWeight& weight) const = 0;
};

/// The scheme object for `kind` (a process-wide, stateless instance).
NIBBLE_API const Scheme& get_scheme(SchemeKind kind);

/// How many stored (packed) zero values of a GPTQ qzeros tensor take each value 0..2^bits-1.
/// `N` is the layer's output count; the tensor's shape must already be checked.
NIBBLE_API std::vector<int64_t> gptq_stored_zero_histogram(const TensorView& qzeros, int bits,
                                                           int64_t N);

/// The scheme a GPTQ layer labelled `labelled` really uses (docs/formats.md#v1-or-v2). For a
/// symmetric layer labelled v1 whose stored zeros are all 2^(bits-1) (v2 style) the answer is
/// GptqV2 and a warning is appended; a mix of v1- and v2-style symmetric zeros, or symmetric zeros
/// of any other value, throws nibble::Error naming the qzeros tensor. Asymmetric layers keep their
/// label.
NIBBLE_API SchemeKind resolve_gptq_scheme(const LayerTensors& tensors, const SchemeParams& params,
                                          SchemeKind labelled, std::vector<std::string>& warnings);

}  // namespace nibble
