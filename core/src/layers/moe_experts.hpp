// The part of building a MoE block that does not care where the experts come from (a checkpoint
// or an engine's tensors): routing options, and describe → select → prepare of the experts, fed
// to the backend one expert at a time.
#pragma once

#include <nibble/runtime.hpp>

#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "prepared_kernel.hpp"

namespace nibble::detail {

/// Decodes expert e into (w13 [2I][K], w2 [K][I]); called while the backend prepares.
using ExpertDecoder = std::function<std::pair<CanonicalWeight, CanonicalWeight>(int expert)>;

/// How a block routes, once the caller's options and the block's defaults are combined.
struct MoeRouting {
  int top_k = 0;
  bool renormalize = false;
  bool sigmoid = false;
};

/// The routing of block `prefix` (num_experts experts): options.top_k (0: `default_top_k`), the
/// renormalisation and scoring options (unset/empty: the defaults). Throws nibble::Error naming
/// the block for a top-k that is unknown or above num_experts, or an unknown scoring.
MoeRouting moe_routing(const std::string& prefix, const MoeOptions& options, int num_experts,
                       int default_top_k, bool default_renormalize,
                       const std::string& default_scoring);

/// Describe the experts of `info` (Runtime::describe_experts), select a kernel and prepare it,
/// the backend pulling each expert from `decode` and giving it back when done.
std::shared_ptr<const PreparedKernel> prepare_experts(const Runtime& rt, const MoeInfo& info,
                                                      int top_k, const ExpertDecoder& decode);

}  // namespace nibble::detail
