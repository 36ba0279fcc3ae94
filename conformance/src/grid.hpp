// Shared pieces of the honesty grid: asking can_implement per activation dtype, preparing once
// for every accepted dtype, and comparing a poisoned output with the float64 reference.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "suite.hpp"

namespace nibble::conformance {

/// The activation dtype bits, in the order the grid runs them.
inline constexpr uint32_t kDtypeFlags[3] = {NIBBLE_DTYPE_F32, NIBBLE_DTYPE_F16, NIBBLE_DTYPE_BF16};

/// Rows per forward call the grid uses.
std::vector<int64_t> grid_rows(bool quick);

/// One prepared handle and the activation dtypes it was prepared for.
struct PreparedFor {
  uint32_t dtypes = 0;
  std::unique_ptr<PreparedLayer> layer;
};

/// Ask `k` about `d` for each activation dtype alone; then prepare (once for all accepted dtypes
/// when the kernel accepts them together, else once per dtype) with `prepare_fn`. Refusals
/// without a reason and accepted-but-failed prepares go into `failures`; *refusal gets the first
/// refusal's reason.
std::vector<PreparedFor> accept_and_prepare(
    const nibble_kernel* k, nibble_layer_desc d,
    const std::function<std::unique_ptr<PreparedLayer>(const nibble_layer_desc&, nibble_status*,
                                                       std::string*)>& prepare_fn,
    std::vector<std::string>& failures, std::string* refusal);

/// "" when every element of y is finite, nothing was written past its end, and
/// ‖y − ref‖/‖ref‖ ≤ bound; else what is wrong. y must have been poisoned with NaN.
std::string compare_output(const Tensor2D& y, const std::vector<double>& ref, double bound);

/// Fill a check result from the failures of one configuration.
void conclude(CheckResult& r, const std::vector<std::string>& failures, const std::string& refusal,
              size_t runs);

/// The MoE part of the grid (grid_moe.cpp).
std::vector<Check> moe_grid_checks(SuiteContext& ctx, const nibble_kernel* k);

}  // namespace nibble::conformance
