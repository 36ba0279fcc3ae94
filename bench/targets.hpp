// The performance targets, evaluated on a run's own JSON: every value is a ratio the bench already
// records per case, taken at the run's highest thread count. On the host (cpu_amx on a whole
// socket): share of the read bandwidth, speed-up over oneDNN or over the loop of linear calls,
// share of the operand-loaded AMX ceiling, and M = 1 scaling between the lowest and every higher
// count. For a run on a device (the run's "device"): speed-up over the backend's own dense kernel
// on the device.
#pragma once

#include <nlohmann/json.hpp>

namespace nibble::bench {

/// The targets a run's cases allow: {"targets": [{"target", "value", "goal", "met", and the
/// case's shape, M, mode, threads}...], "skipped": ["why a target was not evaluated", ...]}.
/// `met` is value >= goal. `run` is the JSON of a linear or MoE run (cases, thread_counts).
nlohmann::json evaluate_targets(const nlohmann::json& run);

/// One line per target (value, goal, met / not met) and per skipped target, on stdout.
void print_targets(const nlohmann::json& evaluated);

}  // namespace nibble::bench
