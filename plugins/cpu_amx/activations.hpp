// Per-call activation preparation, shared by every ISA path: convert (f32/f16 → bf16) or quantize
// (→ int8, step 1 of docs/formats.md#w4a8-numerics) once, in the weight's slot order, into the
// caller's workspace.
#pragma once

#include "kernel_api.hpp"
#include "probe.hpp"

#include <nibble/sdk/plugin.hpp>

#include <algorithm>

namespace nibble::cpu_amx {

/// Rows of the activation buffers are padded to this (two AMX tiles of 16 rows).
constexpr int64_t kRowPad = 32;

inline int64_t padded_rows(int64_t M) { return (M + kRowPad - 1) / kRowPad * kRowPad; }

/// Rows per block when `parts` threads share the preparation of `rows` rows: up to kRowPad, and
/// at least two blocks per part where the rows allow, so at decode each thread prepares a row or
/// two (one block of kRowPad made one thread prepare every row while the others waited).
inline int64_t fill_block_rows(int64_t rows, int64_t parts) {
  return std::clamp<int64_t>(rows / (2 * parts), 1, kRowPad);
}

/// Elements per row of the w4a16 activations for Kp slots: one cache line more than the row, since
/// rows Kp·2 bytes apart (8 KiB for K = 4096) would all map to one L1 set and a 16-row tile load
/// would evict itself.
inline int64_t a16_stride(int64_t Kp) { return Kp + 32; }
/// Bytes per row of the int8 activations: a K = 64 tile may overhang the row by 64 bytes, which
/// also keeps rows out of one L1 set.
inline int64_t a8_stride(int64_t Kp) { return Kp + 64; }

/// Workspace bytes for the w4a16 (bf16) activations of M rows.
size_t a16_workspace_bytes(const PackedLinear& w, int64_t M);
/// Fill the workspace from x (rows [0, M)); rows [m0, m1) only, so callers may split the work.
A16Activations a16_view(const PackedLinear& w, int64_t M, void* workspace);
/// The row arithmetic runs on the ISA level's row kernels (activation_rows.hpp; same bits on all).
void a16_fill(const sdk::Matrix& x, const PackedLinear& w, const A16Activations& a, int64_t m0,
              int64_t m1, IsaLevel level);

/// Workspace bytes for the int8 activations of M rows.
size_t a8_workspace_bytes(const PackedLinear& w, int64_t M);
A8Activations a8_view(const PackedLinear& w, int64_t M, void* workspace);
void a8_fill(const sdk::Matrix& x, const PackedLinear& w, const A8Activations& a, int64_t m0,
             int64_t m1, IsaLevel level);

/// Workspace bytes for the w4a16 fixed-point activations of M rows (A16FixedActivations).
size_t a16_fixed_workspace_bytes(const PackedLinear& w, int64_t M);
A16FixedActivations a16_fixed_view(const PackedLinear& w, int64_t M, void* workspace);
/// Rows [m0, m1) of x as fixed point, chunk by chunk of the weight's a8 chunks; with pieces > 1,
/// only piece `piece` of each row's chunks (equal shares in chunk order), the last piece also the
/// row's padding, so that a decode row can be prepared by several threads at once (an act-order
/// weight's row, staged whole, only by piece 0).
void a16_fixed_fill(const sdk::Matrix& x, const PackedLinear& w, const A16FixedActivations& a,
                    int64_t m0, int64_t m1, IsaLevel level, int64_t piece = 0, int64_t pieces = 1);
/// The most pieces a16_fixed_fill may cut a row into: two chunks or more each, and one where
/// the slots take their channels one by one (act-order), which stage the whole row.
int64_t a16_fixed_fill_pieces(const PackedLinear& w);
/// The same for an n-row buffer whose row m takes row source[m] of x (MoE: an expert's tokens).
void a16_fixed_fill_rows(const sdk::Matrix& x, const int64_t* source, int64_t n,
                         const PackedLinear& w, const A16FixedActivations& a, int64_t m0,
                         int64_t m1, IsaLevel level);

/// Rows [m0, m1) of `to` (an n-row buffer laid out for the same weight slots as `from`) from
/// rows source[m] of `from`; rows ≥ n are padding (zeroed). Lets MoE convert or quantize each
/// token once and hand every expert it is routed to a copy, instead of once per expert.
void a16_gather(const A16Activations& from, const int64_t* source, int64_t n,
                const A16Activations& to, int64_t m0, int64_t m1);
void a8_gather(const A8Activations& from, const int64_t* source, int64_t n, const A8Activations& to,
               int64_t m0, int64_t m1);
/// The same for fixed-point activations (both byte rows, steps and sums of a row); no padding
/// rows (the fixed-point kernels read the n rows only).
void a16_fixed_gather(const A16FixedActivations& from, const int64_t* source, int64_t n,
                      const A16FixedActivations& to, int64_t m0, int64_t m1);

/// Whether two weights take their activations in the same slot layout (same gather, padding and
/// chunks), so that one prepared buffer serves both.
bool same_activation_layout(const PackedLinear& a, const PackedLinear& b);

}  // namespace nibble::cpu_amx
