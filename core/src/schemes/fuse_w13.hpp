// Fusing an expert's gate and up projections into the one w13 weight MoE kernels take.
#pragma once

#include <nibble/canonical_weight.hpp>

#include <string>

namespace nibble::detail {

/// Fuse gate [I][K] and up [I][K] into w13 [2I][K] (gate rows first); throws nibble::Error naming
/// `what` when they differ in anything but their values (K, N, bits, groups, g_idx, dtypes).
CanonicalWeight fuse_w13(CanonicalWeight gate, const CanonicalWeight& up, const std::string& what);

}  // namespace nibble::detail
