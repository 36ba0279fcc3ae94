// The host-side C++ layer over plugin.h, the counterpart of plugin.hpp: what a program that drives
// plugins needs (libnibble, the conformance kit, the bench, plugin tests). Thin on purpose: RAII
// handles, one status check, one descriptor builder, one owned canonical weight. Header-only.
#pragma once

#include <nibble/sdk/host/canonical_weight.hpp>  // CanonicalWeight
#include <nibble/sdk/host/device.hpp>            // kernel_device_type, Device, DeviceBuffer
#include <nibble/sdk/host/device_staging.hpp>    // StagedTensor, StagedForward
#include <nibble/sdk/host/error.hpp>             // CallError, ErrorBuffer, check, guard
#include <nibble/sdk/host/expert_source.hpp>     // ExpertViews
#include <nibble/sdk/host/layer_desc.hpp>        // linear_desc, dense_desc, moe_desc
#include <nibble/sdk/host/loaded_plugin.hpp>     // LoadedPlugin, standalone_host, can_implement
#include <nibble/sdk/host/matrix.hpp>            // matrix_view
#include <nibble/sdk/host/prepared.hpp>          // Prepared, prepare, Workspace
