// A layer part's placement as text: where it runs, the candidates passed over on the way and
// every kernel's verdict (what `nibble run --explain` prints and LinearLayer.explain() returns
// in Python).
#pragma once

#include <nibble/export.hpp>
#include <nibble/runtime.hpp>

#include <string>

namespace nibble {

/// "layer [part]: backend/kernel", then "  passed over:" and "  alternatives:" with one
/// indented line each (a section only when it has lines), every line ending in '\n'. Names from
/// checkpoints and plugins are escaped (escape_untrusted).
NIBBLE_API std::string placement_text(const Placement& placement);

}  // namespace nibble
