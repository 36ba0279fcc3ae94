// Which Marlin kernel a linear layer's forward runs: the streaming kernel reads each weight byte
// once, which is all that matters while M is small; past kTiledRows rows the tiled kernel's
// reuse of each dequantized weight fragment across 128 rows wins.
#include <cstdint>

#include "launch.hpp"

namespace nibble::cuda {

namespace {
constexpr int64_t kTiledRows = 64;
}  // namespace

bool tiled_takes(const GemmArgs& a) {
  return a.items == nullptr && a.w.columns == nullptr && a.epilogue == Epilogue::store &&
         a.x_dtype != DType::f32 && a.ldx % 8 == 0 && reinterpret_cast<uintptr_t>(a.x) % 16 == 0 &&
         a.w.K % 16 == 0 && a.w.N % 64 == 0;
}

cudaError_t launch_marlin(const GemmArgs& a, int sm_count, cudaStream_t stream) {
  if (a.M > kTiledRows && tiled_takes(a))
    return launch_marlin_tiled(a, choose_tiled_cluster(a, sm_count), stream);
  return launch_marlin_stream(a, choose_stream_config(a, sm_count), stream);
}

}  // namespace nibble::cuda
