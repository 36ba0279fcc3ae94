// The host layer's functions that touch structs whose layout depends on NIBBLE_ABI_MINOR (layer
// descriptors, kernels, the host table) live in an inline namespace named after that minor. A
// program may hold hosts of two minors at once (the conformance kit built as a 1.0 host links
// libnibble, a 1.2 host): without the namespace the two would emit one inline function under one
// symbol for two layouts, and the dynamic linker would let one copy serve both.
#pragma once

#include <nibble/sdk/plugin.h>

#define NIBBLE_SDK_HOST_PASTE2(a, b) a##b
#define NIBBLE_SDK_HOST_PASTE(a, b) NIBBLE_SDK_HOST_PASTE2(a, b)
/// The inline namespace of this translation unit's ABI minor, e.g. abi_minor_1.
#define NIBBLE_SDK_HOST_ABI_NAMESPACE NIBBLE_SDK_HOST_PASTE(abi_minor_, NIBBLE_ABI_MINOR)
