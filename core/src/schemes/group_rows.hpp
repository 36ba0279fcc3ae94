// How many rows of scales and qzeros a GPTQ layer has. A checkpoint layer has exactly
// ceil(K / group_size); a row-parallel shard an engine cut keeps the rows its g_idx points at
// (every group's, with act-order), so there the rows are read off scales and g_idx must index
// them. Entry points to the GPTQ scheme (gptq.cpp) with that choice made explicit.
#pragma once

#include <nibble/checkpoint_scheme.hpp>

namespace nibble::schemes {

enum class GroupRows {
  FromGroupSize,  ///< ceil(K / group_size) rows, as every checkpoint layer has
  FromScales      ///< with a g_idx: as many rows as scales has (at least one)
};

/// The GPTQ scheme `kind`'s check with the group rows counted as `rows` says.
LayerShape check_gptq(SchemeKind kind, const LayerTensors& layer, const SchemeParams& params,
                      GroupRows rows);
/// The GPTQ scheme `kind`'s decode with the group rows counted as `rows` says.
CanonicalWeight decode_gptq(SchemeKind kind, const LayerTensors& layer, const SchemeParams& params,
                            GroupRows rows);

}  // namespace nibble::schemes
