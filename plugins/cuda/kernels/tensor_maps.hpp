// Tensor maps (the descriptors the tensor memory accelerator copies boxes with) of a Marlin GEMM's
// activations and packed weights, encoded on the host through the driver's encoder.
#pragma once

#include <cuda.h>

#include "launch.hpp"

namespace nibble::cuda {

/// Whether the driver offers the tensor-map encoder (found once through the runtime).
bool tensor_maps_available();

/// The map of x: rows of K 16-bit values, ldx apart, in boxes of `box_k` input channels × `rows`
/// rows stored with the 128-byte swizzle a warpgroup MMA's descriptor reads; rows past M read
/// zeros. False where the encoder is missing or refuses the tensor.
bool encode_x_map(const GemmArgs& a, int box_k, int rows, CUtensorMap* map);

/// The map of the packed 4-bit weight: K / 16 rows of slabs, each N / 64 runs × 512 bytes (as
/// 32-bit words), in boxes of `slabs` slab rows × `runs` runs, unswizzled. False as above.
bool encode_w_map(const GemmArgs& a, int runs, int slabs, CUtensorMap* map);

}  // namespace nibble::cuda
