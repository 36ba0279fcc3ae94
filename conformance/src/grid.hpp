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

/// Prepares a layer of the grid for the descriptor it is given; nullptr (with *status and
/// *message set) when it fails.
using PrepareFn = std::function<std::unique_ptr<PreparedLayer>(const nibble_layer_desc&,
                                                               nibble_status*, std::string*)>;

/// One prepared handle and the activation dtypes it was prepared for.
struct PreparedFor {
  uint32_t dtypes = 0;
  std::unique_ptr<PreparedLayer> layer;
};

/// Ask `k` about `d` for each activation dtype alone; then prepare (once for all accepted dtypes
/// when the kernel accepts them together, else once per dtype) with `prepare_fn`. Refusals
/// without a reason and accepted-but-failed prepares go into `failures`; *refusal gets the first
/// refusal's reason.
std::vector<PreparedFor> accept_and_prepare(const nibble_kernel* k, nibble_layer_desc d,
                                            const PrepareFn& prepare_fn,
                                            std::vector<std::string>& failures,
                                            std::string* refusal);

/// "" when every element of y is finite, nothing was written past its end, and
/// ‖y − ref‖/‖ref‖ ≤ bound; else what is wrong. y must have been poisoned with NaN.
std::string compare_output(const Tensor2D& y, const std::vector<double>& ref, double bound);

/// One forward call of the grid: runs `layer` on `a` (M rows) into the poisoned `y`, sets
/// *reference to the float64 result expected for the same call and returns the status.
using GridForward =
    std::function<nibble_status(const PreparedLayer& layer, const Activations& a, int64_t M,
                                Tensor2D& y, std::vector<double>* reference, std::string* message)>;

/// Run one configuration through the grid: prepare `d` for each accepted activation dtype, and
/// for each and every grid row count draw K-wide activations (seeded by `seed` + M), call
/// `forward` into a poisoned [M][out_cols] output and compare it with the reference within the
/// kernel's bound. The outcome goes into `r`.
void run_grid(const SuiteContext& ctx, const nibble_kernel* k, const nibble_layer_desc& d,
              const PrepareFn& prepare_fn, int64_t K, int64_t out_cols, uint32_t seed,
              const GridForward& forward, CheckResult& r);

/// Fill a check result from the failures of one configuration.
void conclude(CheckResult& r, const std::vector<std::string>& failures, const std::string& refusal,
              size_t runs);

/// The MoE part of the grid (grid_moe.cpp).
std::vector<Check> moe_grid_checks(SuiteContext& ctx, const nibble_kernel* k);

}  // namespace nibble::conformance
