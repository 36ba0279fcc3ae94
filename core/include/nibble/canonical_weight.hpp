// The canonical quantized weight as the core uses it: what every scheme decodes a checkpoint layer
// into and every kernel repacks from (the owned type is the SDK's), and the core's checks on it.
#pragma once

#include <nibble/export.hpp>
#include <nibble/sdk/host/canonical_weight.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace nibble {

/// One quantized linear layer in canonical form: the SDK's owned type, so a host and the tests
/// hand kernels one and the same thing.
using CanonicalWeight = sdk::host::CanonicalWeight;

/// Throws nibble::Error (naming `what`) unless w's sizes, value ranges and g_idx are consistent.
/// Without a g_idx there are exactly groups_for(K, group_size) groups; with one, any number that
/// every g_idx value indexes (a row-parallel shard keeps groups its own channels do not use).
NIBBLE_API void validate(const CanonicalWeight& w, const std::string& what);

/// Number of groups a layer with K inputs has for `group_size` (-1: one).
NIBBLE_API int64_t groups_for(int64_t K, int group_size);

/// True when g_idx[k] == k / group_size for every k (act-order that costs nothing).
NIBBLE_API bool is_identity_grouping(const std::vector<int32_t>& g_idx, int group_size);

}  // namespace nibble
