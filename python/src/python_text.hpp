// Text from checkpoints and plugins as Python str: valid UTF-8 exactly (a layer name must come
// back unchanged to name the layer again), invalid bytes as \xNN escapes instead of a
// UnicodeDecodeError. Reprs escape the rest (escape_untrusted) before a terminal shows them.
#pragma once

#include <pybind11/pybind11.h>

#include <string_view>

namespace nibble::python {

/// `text` as a Python str, invalid UTF-8 bytes escaped ("backslashreplace").
inline pybind11::str python_text(std::string_view text) {
  return pybind11::reinterpret_steal<pybind11::str>(
      PyUnicode_DecodeUTF8(text.data(), Py_ssize_t(text.size()), "backslashreplace"));
}

}  // namespace nibble::python
