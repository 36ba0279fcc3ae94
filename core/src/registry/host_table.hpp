// The one nibble_host table the core hands to every plugin: logging and the thread budget.
#pragma once

#include <nibble/sdk/plugin.h>

namespace nibble::detail {

/// The process-wide host table (valid for the life of the process).
const nibble_host* host_table();

/// Set the thread budget plugins see (>= 1); 0 means all hardware threads.
void set_thread_budget(int threads);

/// The thread budget now in force (>= 1).
int thread_budget();

}  // namespace nibble::detail
