// NIBBLE_API marks the classes and functions libnibble exports: the host API these headers
// declare. libnibble is built with hidden visibility, so everything else stays inside it and may
// change without touching the host API's version (docs/ARCHITECTURE.md, "Packaging").
#pragma once

/// Exported from libnibble.so (on an exception type it also makes one typeinfo for every caller).
#define NIBBLE_API __attribute__((visibility("default")))
