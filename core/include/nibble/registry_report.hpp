// The registry as data: what `nibble backends --json` prints and what the Python package's
// Runtime.backends() returns, built in one place so the two never disagree.
#pragma once

#include <nibble/export.hpp>
#include <nibble/registry.hpp>

#include <nlohmann/json.hpp>

namespace nibble {

/// A kernel op's label in reports: "linear", "dense" or "moe".
NIBBLE_API const char* op_label(int op);

/// {"searched_dirs": [...], "files": [{path, target, loaded, stage, message, backend}],
///  "backends": [{name, version, vendor, description, file, abi, available, probe, kernels:
///  [{name, op, priority, mode, error_bound: {f32, f16, bf16}}]}]}; names and paths that come
/// from files or plugins are escaped (escape_untrusted).
NIBBLE_API nlohmann::json registry_report(const Registry& registry);

}  // namespace nibble
