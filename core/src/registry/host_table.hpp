// The nibble_host table one registry hands to its plugins, and the state its `ctx` points to:
// logging, and that registry's thread budget. Each Registry has its own, so two Runtimes in one
// process each give their plugins their own budget.
#pragma once

#include <nibble/sdk/plugin.h>

namespace nibble::detail {

/// One registry's host table. Not copyable: the table's ctx points at this object.
class HostTable {
 public:
  /// A table whose thread_budget answers `threads` (0 or less: every hardware thread).
  explicit HostTable(int threads);
  HostTable(const HostTable&) = delete;
  HostTable& operator=(const HostTable&) = delete;

  /// The table to pass to a plugin's entry point; valid while this object lives.
  const nibble_host* table() const { return &table_; }
  /// The thread budget plugins see through this table (>= 1).
  int thread_budget() const { return threads_; }

 private:
  int threads_;
  nibble_host table_{};
};

}  // namespace nibble::detail
