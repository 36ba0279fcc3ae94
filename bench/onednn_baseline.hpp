// The dense baseline: oneDNN's bf16 matmul on the dequantized weight (rounded to bf16), with the
// weights reordered once per copy into the layout oneDNN prefers, and as many copies as the cold
// rotation needs. src/dst bf16, like the quantized kernels' calls in the bench.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace nibble::bench {

class OnednnMatmul {
 public:
  /// `weight` is W[n][k] in fp32; `copies` independent reordered copies are made; every run uses
  /// `threads` OpenMP threads.
  OnednnMatmul(const std::vector<float>& weight, int64_t K, int64_t N, int copies, int threads);
  ~OnednnMatmul();
  /// y[M][N] = x[M][K] · W^T with copy `copy` (bf16 in and out).
  void run(int copy, const uint16_t* x, uint16_t* y, int64_t M);
  size_t weight_bytes() const;  ///< of one copy
  int copies() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace nibble::bench
