// Portable building blocks for reference backends that compute on the host CPU in plain C++:
// staging activations as f32 rows in a kernel's input order, a blocked fp32 GEMM over any weight
// layout that can decode a (K-chunk × N-block) tile of itself, and a linear forward pass that ties
// them together. Additive helpers: nothing in plugin.h/plugin.hpp depends on this header.
//
// A weight layout used with these templates provides
//   int64_t N() const;                    outputs
//   int64_t width() const;                columns of the staged f32 input rows it reads
//   const std::vector<int32_t>& input_columns() const;
//                                         for each of the `width` staged columns, the column of x
//                                         it holds, or -1 for padding (zero); empty = identity
//   int64_t chunk_count() const;          K is read in chunks of at most kMaxChunk staged rows
//   KRange chunk(int64_t c) const;        [begin, end) of chunk c in staged columns
//   void decode(int64_t c, int64_t n0, int64_t n1, float* tile) const;
//                                         tile[(k - begin) * (n1 - n0) + (n - n0)] = W[n][k] as
//                                         fp32, reading the layout's own packed form; n0 is a
//                                         multiple of kColBlock
// Each chunk's products are summed in fp32 on their own before joining the running fp32 total,
// which keeps the rounding error of long reductions near that of a 128-term sum.
#pragma once

#include <nibble/sdk/numeric.hpp>
#include <nibble/sdk/plugin.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace nibble::sdk::portable {

/// Rows of activations one task computes.
constexpr int64_t kRowBlock = 32;
/// Output columns one task computes (Marlin's tile width, so every layout can align to it).
constexpr int64_t kColBlock = 64;
/// Longest run of K summed in fp32 before it joins the running total.
constexpr int64_t kMaxChunk = 128;

/// A half-open range of staged input columns.
struct KRange {
  int64_t begin = 0;
  int64_t end = 0;
};

/// Ceiling division for non-negative values.
constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// Split [0, width) into chunks of at most kMaxChunk columns that never cross a boundary in
/// `boundaries` (sorted staged-column offsets, e.g. group starts; may be empty).
inline std::vector<KRange> split_chunks(int64_t width, const std::vector<int64_t>& boundaries) {
  std::vector<int64_t> cuts(boundaries);
  cuts.push_back(0);
  cuts.push_back(width);
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  std::vector<KRange> chunks;
  for (size_t i = 0; i + 1 < cuts.size(); ++i)
    for (int64_t b = cuts[i]; b < cuts[i + 1]; b += kMaxChunk)
      chunks.push_back(KRange{b, std::min(cuts[i + 1], b + kMaxChunk)});
  return chunks;
}

/// Stage rows [m0, m1) of `x` as f32 rows of `width` columns at `dst` (row stride `ld`): staged
/// column j holds x column columns[j] (or 0 where columns[j] is -1); empty `columns` = identity.
inline void stage_rows(const Matrix& x, int64_t m0, int64_t m1, const std::vector<int32_t>& columns,
                       int64_t width, float* dst, int64_t ld) {
  const bool is_f32 = same_dtype(x.dtype, dtype_f32());
  for (int64_t m = m0; m < m1; ++m) {
    float* out = dst + (m - m0) * ld;
    if (columns.empty()) {
      if (is_f32) {
        std::memcpy(out, x.row<const float>(m), size_t(width) * sizeof(float));
      } else {
        for (int64_t k = 0; k < width; ++k) out[k] = x.get(m, k);
      }
      continue;
    }
    for (int64_t j = 0; j < width; ++j) {
      int32_t src = columns[size_t(j)];
      out[j] = src < 0 ? 0.f : x.get(m, src);
    }
  }
}

/// Scratch one GEMM task reuses across chunks.
struct TileScratch {
  std::vector<float> tile;
  std::vector<float> partial;
};

/// out[r][n - n0] = Σ_k x[r][k] · W[n][k] for r < rows, n in [n0, n1), with x staged in the
/// layout's column order (row stride ldx) and out of row stride (n1 - n0).
template <class Layout>
void multiply_block(const Layout& w, const float* x, int64_t ldx, int64_t rows, int64_t n0,
                    int64_t n1, float* out, TileScratch& scratch) {
  const int64_t nb = n1 - n0;
  std::fill(out, out + rows * nb, 0.f);
  scratch.tile.resize(size_t(kMaxChunk * nb));
  scratch.partial.resize(size_t(nb));
  float* tile = scratch.tile.data();
  float* partial = scratch.partial.data();
  for (int64_t c = 0; c < w.chunk_count(); ++c) {
    const KRange r = w.chunk(c);
    w.decode(c, n0, n1, tile);
    for (int64_t m = 0; m < rows; ++m) {
      std::fill(partial, partial + nb, 0.f);
      const float* xr = x + m * ldx;
      for (int64_t k = r.begin; k < r.end; ++k) {
        const float xv = xr[k];
        const float* t = tile + (k - r.begin) * nb;
        for (int64_t n = 0; n < nb; ++n) partial[n] += xv * t[n];
      }
      float* o = out + m * nb;
      for (int64_t n = 0; n < nb; ++n) o[n] += partial[n];
    }
  }
}

/// Workspace a linear forward over `width` staged columns needs for M rows.
inline size_t linear_workspace_bytes(int64_t M, int64_t width) {
  return size_t(M) * size_t(width) * sizeof(float);
}

/// y = x · Wᵀ + bias for a layout: stage x into the workspace, then one task per (row block,
/// column block). `parallel(count, f)` runs f(0 .. count-1), possibly concurrently.
template <class Layout, class Parallel>
void linear_forward(const Layout& w, const std::vector<float>& bias, const ForwardArgs& a,
                    const Exec& exec, const Parallel& parallel) {
  const int64_t M = a.M, N = w.N(), width = w.width();
  require(exec.workspace_size >= linear_workspace_bytes(M, width), "forward: workspace too small");
  float* staged = static_cast<float*>(exec.workspace);
  const int64_t row_blocks = ceil_div(M, kRowBlock);
  parallel(row_blocks, [&](int64_t b) {
    const int64_t m0 = b * kRowBlock, m1 = std::min(M, m0 + kRowBlock);
    stage_rows(a.x, m0, m1, w.input_columns(), width, staged + m0 * width, width);
  });
  const int64_t col_blocks = ceil_div(N, kColBlock);
  parallel(row_blocks * col_blocks, [&](int64_t t) {
    const int64_t m0 = (t / col_blocks) * kRowBlock, m1 = std::min(M, m0 + kRowBlock);
    const int64_t n0 = (t % col_blocks) * kColBlock, n1 = std::min(N, n0 + kColBlock);
    const int64_t nb = n1 - n0;
    std::vector<float> out(size_t((m1 - m0) * nb));
    TileScratch scratch;
    multiply_block(w, staged + m0 * width, width, m1 - m0, n0, n1, out.data(), scratch);
    for (int64_t m = m0; m < m1; ++m) {
      const float* o = out.data() + (m - m0) * nb;
      for (int64_t n = n0; n < n1; ++n)
        a.y.set(m, n, bias.empty() ? o[n - n0] : o[n - n0] + bias[size_t(n)]);
    }
  });
}

/// A bias as f32 (empty when absent).
inline std::vector<float> bias_as_f32(const void* bias, DLDataType dtype, int64_t N) {
  std::vector<float> out;
  if (!bias) return out;
  require(is_float_dtype(dtype), "bias dtype " + dtype_name(dtype) + " is not f32, f16 or bf16");
  out.resize(size_t(N));
  for (int64_t n = 0; n < N; ++n) out[size_t(n)] = load_float(bias, dtype, size_t(n));
  return out;
}

/// A plain weight kept as f32, transposed to [K][N] so a tile is a run of contiguous rows.
/// Widening f16/bf16 to f32 is exact, so the dense kernels add only the GEMM's own rounding.
class DenseLayout {
 public:
  /// Copy and transpose `w` (validated here).
  explicit DenseLayout(const nibble_dense_weight& w) : K_(w.K), N_(w.N) {
    require(w.K > 0 && w.N > 0,
            "dense weight: empty (K " + std::to_string(w.K) + ", N " + std::to_string(w.N) + ")");
    require(w.data != nullptr, "dense weight: data is null");
    require(is_float_dtype(w.dtype),
            "dense weight: dtype " + dtype_name(w.dtype) + " is not f32, f16 or bf16");
    wt_.resize(size_t(K_ * N_));
    for (int64_t n = 0; n < N_; ++n)
      for (int64_t k = 0; k < K_; ++k)
        wt_[size_t(k * N_ + n)] = load_float(w.data, w.dtype, size_t(n * K_ + k));
    chunks_ = split_chunks(K_, {});
  }
  int64_t N() const { return N_; }
  int64_t width() const { return K_; }
  const std::vector<int32_t>& input_columns() const { return identity_; }
  int64_t chunk_count() const { return int64_t(chunks_.size()); }
  KRange chunk(int64_t c) const { return chunks_[size_t(c)]; }
  void decode(int64_t c, int64_t n0, int64_t n1, float* tile) const {
    const KRange r = chunks_[size_t(c)];
    const int64_t nb = n1 - n0;
    for (int64_t k = r.begin; k < r.end; ++k)
      std::memcpy(tile + (k - r.begin) * nb, &wt_[size_t(k * N_ + n0)], size_t(nb) * sizeof(float));
  }
  size_t bytes() const { return wt_.size() * sizeof(float); }

 private:
  int64_t K_, N_;
  std::vector<float> wt_;
  std::vector<KRange> chunks_;
  std::vector<int32_t> identity_;
};

/// A linear layer prepared in some layout: forward stages x, multiplies and adds the bias.
/// `Parallel` is constructed from the call's thread count and runs `(count, f)` (see above).
template <class Layout, class Parallel>
class LinearPrepared : public Prepared {
 public:
  /// Take the prepared layout and the bias (empty for none).
  LinearPrepared(Layout weight, std::vector<float> bias)
      : weight_(std::move(weight)), bias_(std::move(bias)) {}
  size_t bytes() const override { return weight_.bytes() + bias_.size() * sizeof(float); }
  size_t workspace_bytes(int64_t M) const override {
    return linear_workspace_bytes(M, weight_.width());
  }
  void forward(const ForwardArgs& args, const Exec& exec) const override {
    linear_forward(weight_, bias_, args, exec, Parallel(exec.num_threads));
  }
  /// The prepared layout (read-only).
  const Layout& layout() const { return weight_; }

 private:
  Layout weight_;
  std::vector<float> bias_;
};

}  // namespace nibble::sdk::portable
