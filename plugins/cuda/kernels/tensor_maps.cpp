// The driver's cuTensorMapEncodeTiled, reached through the runtime's entry-point query so that the
// plugin links no driver library (the runtime is static and the driver may be absent).
#include "tensor_maps.hpp"

#include <cuda_runtime.h>

namespace nibble::cuda {
namespace {

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                 const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                 const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                 CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

EncodeTiled tensor_map_encoder() {
  static const EncodeTiled encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      return EncodeTiled(nullptr);
    }
    return reinterpret_cast<EncodeTiled>(fn);
  }();
  return encode;
}

}  // namespace

bool tensor_maps_available() { return tensor_map_encoder() != nullptr; }

bool encode_x_map(const GemmArgs& a, int box_k, int rows, CUtensorMap* map) {
  const EncodeTiled encode = tensor_map_encoder();
  if (encode == nullptr) return false;
  const cuuint64_t dims[2] = {cuuint64_t(a.w.K), cuuint64_t(a.M)};
  const cuuint64_t strides[1] = {cuuint64_t(a.ldx) * 2};
  const cuuint32_t box[2] = {cuuint32_t(box_k), cuuint32_t(rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  return encode(map,
                a.x_dtype == DType::f16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                        : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
                2, const_cast<void*>(a.x), dims, strides, box, element_strides,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

bool encode_w_map(const GemmArgs& a, int runs, int slabs, CUtensorMap* map) {
  const EncodeTiled encode = tensor_map_encoder();
  if (encode == nullptr) return false;
  const cuuint64_t dims[2] = {cuuint64_t(a.w.N) * 2, cuuint64_t(a.w.K / 16)};
  const cuuint64_t strides[1] = {cuuint64_t(a.w.N) * 8};
  const cuuint32_t box[2] = {cuuint32_t(runs * 128), cuuint32_t(slabs)};
  const cuuint32_t element_strides[2] = {1, 1};
  return encode(map, CU_TENSOR_MAP_DATA_TYPE_UINT32, 2, const_cast<uint32_t*>(a.w.qweight), dims,
                strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

}  // namespace nibble::cuda
