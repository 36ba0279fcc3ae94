// The blocked layout every cpu_amx linear kernel (and, later, the MoE kernels) reads, and the
// repack from the canonical weight into it. Portable code: compiled without ISA flags.
//
// Layout (docs/cpu_amx.md draws it):
//  - Output columns come in panels of 16 (one AMX tile width, one zmm of fp32). N is padded to a
//    multiple of 16 with zero scales, so padded columns compute 0 and are never stored.
//  - Input channels are sorted by group (act-order: g_idx permutation, applied once here) and each
//    group is padded to a multiple of 32 channels (a k-tile: one bf16 AMX tile depth). Padded slots
//    map to no source channel: the activation buffers hold 0 there, so they contribute nothing.
//  - Weights: [panel][k-tile][plane][256 bytes]; 4-bit has one plane (the value), 8-bit two (low
//    and high nibble), so every micro-kernel unpacks nibbles only. A 256-byte tile is 4 sub-chunks
//    of 64 bytes = 32 little-endian 16-bit words; word j is column j/2, k-parity j%2, and its
//    nibble s holds input slot 8*sub + 2*s + j%2. Nibble s of every word, OR-ed into 0x4300, is one
//    bf16 AMX/VDPBF16PS row (a k-pair × 16 columns) of value 128 + q — exact, one instruction.
//  - Scales: [panel][group][16] in the checkpoint's own dtype (f16 and bf16 as 16-bit words, f32
//    as 32-bit words), widened to fp32 in registers where they are used (exact: every f16/bf16
//    value is an fp32 value), so the arithmetic is fp32 and a 4-bit group-32 weight stays within
//    1.03x of its checkpoint bytes. Zero points: uint8 [panel][group][16].
#pragma once

#include <nibble/sdk/plugin.hpp>
#include <nibble/sdk/weights.hpp>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

namespace nibble::cpu_amx {

constexpr int kPanel = 16;       ///< output columns per panel
constexpr int kTileK = 32;       ///< input slots per k-tile
constexpr int kTileBytes = 256;  ///< bytes of one plane of one (panel, k-tile)
constexpr int kMaxBlockK = 128;  ///< W4A8 block_k = min(gs, 128): docs/formats.md#w4a8-numerics

/// 64-byte aligned storage.
template <class T>
class AlignedArray {
 public:
  AlignedArray() = default;
  /// n elements, zero-filled unless `zero` is false (the caller writes every byte).
  explicit AlignedArray(size_t n, bool zero = true) : n_(n) {
    if (n) {
      size_t bytes = (n * sizeof(T) + 63) / 64 * 64;
      p_.reset(static_cast<T*>(std::aligned_alloc(64, bytes)));
      if (!p_) throw std::bad_alloc();
      if (zero) std::memset(static_cast<void*>(p_.get()), 0, bytes);
    }
  }
  T* data() { return p_.get(); }
  const T* data() const { return p_.get(); }
  size_t size() const { return n_; }
  size_t bytes() const { return n_ * sizeof(T); }
  T& operator[](size_t i) { return p_[i]; }
  const T& operator[](size_t i) const { return p_[i]; }

 private:
  struct Free {
    void operator()(T* p) const { std::free(p); }
  };
  std::unique_ptr<T[], Free> p_;
  size_t n_ = 0;
};

/// A run of k-tiles that share one group: the unit of one epilogue (scale, zero, sum).
struct Chunk {
  int32_t tile0 = 0;   ///< first k-tile
  int32_t ntiles = 0;  ///< k-tiles in the chunk
  int32_t group = 0;   ///< group whose scale and zero apply
};

/// A repacked quantized linear weight (immutable after pack_linear).
struct PackedLinear {
  int64_t K = 0, N = 0;  ///< the layer's shape
  int64_t Kp = 0;        ///< input slots after sorting and padding (multiple of 32)
  int64_t Np = 0;        ///< N rounded up to a panel
  int64_t panels = 0, ktiles = 0, groups = 0;
  int bits = 4, planes = 1;
  enum class ScaleFormat : uint8_t { f16, bf16, f32 };
  ScaleFormat scale_format = ScaleFormat::f16;  ///< the checkpoint's scale dtype, kept as is
  AlignedArray<uint8_t> q;                      ///< [panel][ktile][plane][256]
  AlignedArray<uint16_t> scale_halfs;           ///< [panel][group][16] for f16/bf16 scales
  AlignedArray<uint32_t> scale_words;           ///< [panel][group][16] for f32 scales
  AlignedArray<uint8_t> zeros;                  ///< [panel][group][16]
  AlignedArray<float> bias;                     ///< [Np] or empty
  /// How activations fill the slots. Without act-order a few contiguous runs (slots [dst, dst+len)
  /// take channels [src, src+len), in slot order); with act-order, when runs would be short,
  /// `slot_source` instead (source channel of every slot, -1 for padding) and `runs` is empty.
  struct Run {
    int32_t dst, src, len;
  };
  std::vector<Run> runs;
  std::vector<int32_t> slot_source;
  /// w4a16 chunks: one per group (the epilogue runs once per group).
  std::vector<Chunk> a16_chunks;
  /// w4a8 chunks: blocks of min(group size, 128) inputs within a group
  /// (docs/formats.md#w4a8-numerics).
  std::vector<Chunk> a8_chunks;

  const uint8_t* tile(int64_t panel, int64_t ktile) const {
    return q.data() + size_t((panel * ktiles + ktile) * planes) * kTileBytes;
  }
  /// Bytes of one panel (all its k-tiles and planes): the distance between two panel streams.
  size_t panel_bytes() const { return size_t(ktiles * planes) * kTileBytes; }
  /// The 16 scales of a panel's group: 16-bit words (f16/bf16) or fp32 bit patterns (f32).
  const uint16_t* halfs_of(int64_t panel, int64_t group) const {
    return scale_halfs.data() + size_t(panel * groups + group) * kPanel;
  }
  const uint32_t* words_of(int64_t panel, int64_t group) const {
    return scale_words.data() + size_t(panel * groups + group) * kPanel;
  }
  const uint8_t* zeros_of(int64_t panel, int64_t group) const {
    return zeros.data() + size_t(panel * groups + group) * kPanel;
  }
  /// Bytes held by the weight (everything allocated for it).
  size_t bytes() const;
};

/// Why the layout cannot hold this layer ("" when it can).
std::string packing_limits(const nibble_layer_desc& desc);

/// Repack a canonical weight (checked by sdk::QuantWeight) into the blocked layout. With a
/// column map (a permutation of [0, N)), output column n computes the weight's column
/// column_source[n]: a caller may reorder outputs at no cost (MoE interleaves gate and up).
std::unique_ptr<PackedLinear> pack_linear(const sdk::QuantWeight& w, int threads,
                                          const std::vector<int32_t>* column_source = nullptr);

/// The bytes the checkpoint's packed tensors take (4-bit: K·N/2 + scales + packed zeros + g_idx +
/// bias): the yardstick of the 1.10 × size bound.
size_t checkpoint_bytes(const sdk::QuantWeight& w);

}  // namespace nibble::cpu_amx
