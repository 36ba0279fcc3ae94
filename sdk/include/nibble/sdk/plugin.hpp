// The C++ layer over plugin.h: a plugin author writes ordinary classes (a Backend, some Kernels,
// their Prepared weights) and one macro, NIBBLE_PLUGIN(BackendClass). This header generates the C
// tables, stamps struct sizes, validates tensors the same way for every plugin, and turns every
// exception into a status at the boundary. Header-only; needs C++17. One header per part:
#pragma once

#include <nibble/sdk/plugin.h>
#include <nibble/sdk/device.hpp>  // device names, which tensors fit which device
#include <nibble/sdk/numeric.hpp>
#include <nibble/sdk/plugin/device_memory.hpp>  // DeviceMemory: a device backend's memory calls
#include <nibble/sdk/plugin/error.hpp>          // sdk::PluginError, require, the status mapping
#include <nibble/sdk/plugin/glue.hpp>           // the C tables, loads, NIBBLE_PLUGIN
#include <nibble/sdk/plugin/host_services.hpp>  // sdk::Host: log, thread budget
#include <nibble/sdk/plugin/kernel.hpp>         // Backend, Kernel, Prepared
#include <nibble/sdk/plugin/tensor_checks.hpp>  // Matrix, ForwardArgs and their checks
