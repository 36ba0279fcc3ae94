// Repack of the canonical weight into the blocked layout described in packed_weight.hpp.
#include "packed_weight.hpp"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <cstring>

namespace nibble::cpu_amx {

size_t PackedLinear::bytes() const {
  return q.bytes() + scale_halfs.bytes() + scale_words.bytes() + zeros.bytes() + bias.bytes() +
         slot_source.size() * sizeof(int32_t) + runs.size() * sizeof(Run) +
         (a16_chunks.size() + a8_chunks.size()) * sizeof(Chunk) + sizeof(PackedLinear);
}

std::string packing_limits(const nibble_layer_desc& d) {
  if (d.bits != 4 && d.bits != 8) return "bits " + std::to_string(d.bits) + " (only 4 and 8)";
  if (d.group_size != -1 && (d.group_size <= 0 || d.group_size % kTileK != 0))
    return "group size " + std::to_string(d.group_size) +
           " is not -1 or a multiple of 32 (the k-tile); groups would split tiles";
  if (d.K <= 0 || d.N <= 0) return "empty layer";
  if (d.K > (int64_t(1) << 30) || d.N > (int64_t(1) << 30)) return "K or N above 2^30";
  return "";
}

size_t checkpoint_bytes(const sdk::QuantWeight& w) {
  size_t kn = size_t(w.K()) * size_t(w.N());
  size_t gn = size_t(w.num_groups()) * size_t(w.N());
  size_t scale_bytes = sdk::dtype_bytes(w.raw().scales_dtype);
  size_t b = kn * size_t(w.bits()) / 8 + gn * scale_bytes + gn * size_t(w.bits()) / 8;
  if (w.has_g_idx()) b += size_t(w.K()) * 4;
  if (w.has_bias()) b += size_t(w.N()) * sdk::dtype_bytes(w.raw().bias_dtype);
  return b;
}

namespace {

// Sort the input channels by group, pad each group to whole k-tiles, and cut the chunks.
void lay_out_inputs(const sdk::QuantWeight& w, PackedLinear& p) {
  std::vector<int32_t> order = sdk::channels_sorted_by_group(w);  // checks g_idx ranges too
  const int64_t G = w.num_groups();
  const int64_t gs = w.group_size() > 0 ? w.group_size() : w.K();
  const int64_t block_k = std::min<int64_t>(gs, kMaxBlockK);
  p.slot_source.clear();
  size_t i = 0;
  for (int64_t g = 0; g < G; ++g) {
    size_t begin = i;
    while (i < order.size() && w.group(order[i]) == g) ++i;
    const int64_t count = int64_t(i - begin);
    if (count == 0) continue;  // an unused group (possible with g_idx) costs nothing
    const int32_t tile0 = int32_t(p.slot_source.size() / kTileK);
    const int64_t padded = (count + kTileK - 1) / kTileK * kTileK;
    for (int64_t j = 0; j < padded; ++j)
      p.slot_source.push_back(j < count ? order[begin + size_t(j)] : -1);
    const int32_t ntiles = int32_t(padded / kTileK);
    p.a16_chunks.push_back(Chunk{tile0, ntiles, int32_t(g)});
    // Integer blocks of block_k inputs; block_k is a multiple of 32 unless the group is one block.
    for (int64_t j = 0; j < count; j += block_k) {
      int64_t len = std::min(block_k, count - j);
      int32_t t = int32_t(j / kTileK);
      int32_t nt = int32_t((len + kTileK - 1) / kTileK);
      p.a8_chunks.push_back(Chunk{tile0 + t, nt, int32_t(g)});
    }
  }
  p.Kp = int64_t(p.slot_source.size());
  p.ktiles = p.Kp / kTileK;
  // Runs of consecutive source channels, so activations are copied, not gathered, without g_idx.
  for (int32_t s = 0; s < int32_t(p.Kp);) {
    int32_t src = p.slot_source[size_t(s)];
    if (src < 0) {
      ++s;
      continue;
    }
    int32_t len = 1;
    while (s + len < p.Kp && p.slot_source[size_t(s + len)] == src + len) ++len;
    p.runs.push_back(PackedLinear::Run{s, src, len});
    s += len;
  }
}

// Pack one panel: every k-tile of its 16 columns. First each column's values are gathered into
// slot order (runs are memcpy), then every 8 slots of a column become two words with shifts.
void pack_panel(const sdk::QuantWeight& w, PackedLinear& p, int64_t panel,
                const std::vector<int32_t>& slot_source, const std::vector<int32_t>* column_source,
                std::vector<uint8_t>& rows) {
  auto source_of = [&](int64_t n) {
    return column_source ? int64_t((*column_source)[size_t(n)]) : n;
  };
  const int64_t K = w.K(), N = w.N(), Kp = p.Kp;
  const uint8_t* q = w.raw().q;
  const auto* scales = static_cast<const uint8_t*>(w.raw().scales);
  rows.resize(size_t(kPanel * Kp));
  // Without padding slots the runs cover every slot of a real column.
  const bool gaps = p.runs.empty() || Kp != K;
  for (int c = 0; c < kPanel; ++c) {
    const int64_t n = panel * kPanel + c;
    uint8_t* dst = rows.data() + size_t(c) * size_t(Kp);
    if (n >= N || gaps) std::memset(dst, 0, size_t(Kp));
    if (n >= N) continue;  // padded columns stay 0 (their scale is 0 too)
    const uint8_t* src = q + size_t(source_of(n)) * size_t(K);
    if (!p.runs.empty()) {
      for (const auto& run : p.runs) std::memcpy(dst + run.dst, src + run.src, size_t(run.len));
    } else {
      for (int64_t j = 0; j < Kp; ++j)
        dst[j] = slot_source[size_t(j)] >= 0 ? src[slot_source[size_t(j)]] : 0;
    }
  }
  // Slots 8·sub .. 8·sub+7 of column c, one per byte of a uint64, become two words: even slots
  // (parity 0) and odd slots (parity 1), nibble s holding slot 8·sub + 2s + parity.
  auto word_of = [](uint64_t lanes) {  // lanes: 4 values ≤ 15 at bits 0, 16, 32, 48
    const uint64_t v = lanes | (lanes >> 12);
    return uint16_t((v & 0xFF) | ((v >> 24) & 0xFF00));
  };
  for (int64_t t = 0; t < p.ktiles; ++t)
    for (int plane = 0; plane < p.planes; ++plane) {
      uint8_t* out = p.q.data() + size_t((panel * p.ktiles + t) * p.planes + plane) * kTileBytes;
      for (int sub = 0; sub < 4; ++sub)
        for (int c = 0; c < kPanel; ++c) {
          uint64_t x;
          std::memcpy(&x, rows.data() + size_t(c) * size_t(Kp) + size_t(t) * kTileK + 8 * sub, 8);
          x = (x >> (4 * plane)) & 0x0F0F0F0F0F0F0F0Full;
          const uint16_t even = word_of(x & 0x00FF00FF00FF00FFull);
          const uint16_t odd = word_of((x >> 8) & 0x00FF00FF00FF00FFull);
          std::memcpy(out + sub * 64 + 4 * c, &even, 2);
          std::memcpy(out + sub * 64 + 4 * c + 2, &odd, 2);
        }
    }
  // Scales and zero points of the panel, per group.
  for (int64_t g = 0; g < p.groups; ++g)
    for (int c = 0; c < kPanel; ++c) {
      const int64_t n = panel * kPanel + c;
      const size_t at = size_t(panel * p.groups + g) * kPanel + size_t(c);
      // Padded columns: scale 0 (all dtypes' zero is all-zero bits), so they compute 0.
      const int64_t src = n < N ? source_of(n) : 0;
      p.zeros[at] = n < N ? w.zero(g, src) : 0;
      if (p.scale_format == PackedLinear::ScaleFormat::f32) {
        p.scale_words[at] = n < N ? sdk::float_bits(w.scale(g, src)) : 0u;
      } else {
        uint16_t bits = 0;
        if (n < N) std::memcpy(&bits, scales + (size_t(g) * size_t(N) + size_t(src)) * 2, 2);
        p.scale_halfs[at] = bits;
      }
    }
}

}  // namespace

std::unique_ptr<PackedLinear> pack_linear(const sdk::QuantWeight& w, int threads,
                                          const std::vector<int32_t>* column_source) {
  if (column_source) {
    std::vector<bool> seen(size_t(w.N()), false);
    sdk::require(int64_t(column_source->size()) == w.N(),
                 "pack_linear: the column map has " + std::to_string(column_source->size()) +
                     " entries for " + std::to_string(w.N()) + " columns");
    for (int32_t c : *column_source) {
      sdk::require(c >= 0 && c < w.N() && !seen[size_t(c)],
                   "pack_linear: the column map is not a permutation");
      seen[size_t(c)] = true;
    }
  }
  auto p = std::make_unique<PackedLinear>();
  p->K = w.K();
  p->N = w.N();
  p->bits = w.bits();
  p->planes = w.bits() / 4;
  p->groups = w.num_groups();
  p->Np = (w.N() + kPanel - 1) / kPanel * kPanel;
  p->panels = p->Np / kPanel;
  const DLDataType sd = w.raw().scales_dtype;
  p->scale_format = sd.bits == 32          ? PackedLinear::ScaleFormat::f32
                    : sd.code == kDLBfloat ? PackedLinear::ScaleFormat::bf16
                                           : PackedLinear::ScaleFormat::f16;
  const int max_zero = w.bits() == 4 ? 16 : 255;  // 4-bit: GPTQ v1's stored 0xF decodes to 16
  for (int64_t g = 0; g < w.num_groups(); ++g)
    for (int64_t n = 0; n < w.N(); ++n)
      if (int z = w.zero(g, n); z > max_zero)
        throw sdk::PluginError(NIBBLE_INVALID_ARGUMENT,
                               "zero point " + std::to_string(z) + " at group " +
                                   std::to_string(g) + ", column " + std::to_string(n) +
                                   " is outside 0.." + std::to_string(max_zero));
  lay_out_inputs(w, *p);
  p->q = AlignedArray<uint8_t>(size_t(p->panels * p->ktiles * p->planes) * kTileBytes, false);
  const size_t scale_count = size_t(p->panels * p->groups) * kPanel;
  if (p->scale_format == PackedLinear::ScaleFormat::f32)
    p->scale_words = AlignedArray<uint32_t>(scale_count);
  else
    p->scale_halfs = AlignedArray<uint16_t>(scale_count);
  p->zeros = AlignedArray<uint8_t>(scale_count);
  if (w.has_bias()) {
    p->bias = AlignedArray<float>(size_t(p->Np));
    for (int64_t n = 0; n < w.N(); ++n)
      p->bias[size_t(n)] = w.bias(column_source ? (*column_source)[size_t(n)] : n);
  }
  // Keep whichever slot map is smaller: runs (12 bytes each) or one int32 per slot.
  std::vector<int32_t> slot_source = p->slot_source;
  if (p->runs.size() * sizeof(PackedLinear::Run) > p->slot_source.size() * sizeof(int32_t))
    p->runs.clear();
  else
    std::vector<int32_t>().swap(p->slot_source);
  tbb::task_arena arena(std::max(1, threads));
  arena.execute([&] {
    tbb::parallel_for(tbb::blocked_range<int64_t>(0, p->panels),
                      [&](const tbb::blocked_range<int64_t>& r) {
                        std::vector<uint8_t> rows;
                        for (int64_t panel = r.begin(); panel < r.end(); ++panel)
                          pack_panel(w, *p, panel, slot_source, column_source, rows);
                      });
  });
  return p;
}

}  // namespace nibble::cpu_amx
