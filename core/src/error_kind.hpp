// Giving a plain nibble::Error its kind where the caller knows it: the readers and schemes throw
// a plain Error, and whoever called them knows whose fault it is — a checkpoint's files
// (CheckpointError) or an engine's tensors (InvalidArgument). An error that already says its
// kind passes unchanged.
#pragma once

#include <nibble/error.hpp>

#include <typeinfo>
#include <utility>

namespace nibble::detail {

/// Run `f`, turning a plain nibble::Error it throws into a `Kind` with the same message.
template <class Kind, class F>
decltype(auto) with_error_kind(F&& f) {
  try {
    return std::forward<F>(f)();
  } catch (const Error& e) {
    if (typeid(e) != typeid(Error)) throw;
    throw Kind(e.what());
  }
}

}  // namespace nibble::detail
