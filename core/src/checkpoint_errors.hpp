// Failures while reading a checkpoint's files are the checkpoint's: the readers (safetensors,
// config, schemes) throw a plain nibble::Error, which the checkpoint's entry points turn into a
// CheckpointError; an error that already says its kind passes unchanged.
#pragma once

#include <nibble/error.hpp>

#include <typeinfo>
#include <utility>

namespace nibble::detail {

/// Run `read`, turning a plain nibble::Error it throws into a CheckpointError (same message).
template <class F>
decltype(auto) as_checkpoint_error(F&& read) {
  try {
    return std::forward<F>(read)();
  } catch (const Error& e) {
    if (typeid(e) != typeid(Error)) throw;
    throw CheckpointError(e.what());
  }
}

}  // namespace nibble::detail
