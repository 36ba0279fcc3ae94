// Test support: random canonical weights, dense weights and activations, owning tensors and
// float64 reference results for linear, dense and MoE layers. They are the conformance kit's own
// public reference, so the tests and the kit hold plugins to one reference.
#pragma once

#include <nibble/conformance/reference.hpp>

namespace nibble::test {
using namespace nibble::conformance;
}  // namespace nibble::test
