// Dispatch and threading of the quantized linear kernels. Compiled without ISA flags: it only
// picks, by the probe's ISA level (re-read at every prepare), which micro-kernel file runs, and
// splits the work over the worker pool (worker_pool.hpp) in one dispatch per call: the threads
// prepare the activation rows in blocks, each its own and then any left, wait until all are
// done (or, for few rows, each thread prepares them all for itself and waits for nobody), then
// run the units of a static split of rows × panels, each thread its own first (so it keeps its
// slice of the weight from call to call), then those of late threads.
#include "linear_kernels.hpp"

#include "activations.hpp"
#include "kernel_api.hpp"
#include "packed_weight.hpp"
#include "probe.hpp"

#include <nibble/sdk/env.hpp>
#include <nibble/sdk/weights.hpp>

#include "worker_pool.hpp"

#include <tbb/global_control.h>

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <limits>
#include <memory>
#include <string>

namespace nibble::cpu_amx {
namespace {

enum class Mode { a16, a8 };

struct Paths {
  A16Fn a16_small, a16_large;
  A8Fn a8_small, a8_large;
  const char* name_small;
  const char* name_large;
};

Paths paths_for(IsaLevel level) {
  switch (level) {
    case IsaLevel::amx:
      return {&a16_avx512, &a16_amx, &a8_avx512, &a8_amx, "avx512", "amx"};
    case IsaLevel::avx512:
      return {&a16_avx512, &a16_avx512, &a8_avx512, &a8_avx512, "avx512", "avx512"};
    case IsaLevel::avx2:
      return {&a16_avx2, &a16_avx2, &a8_avx2, &a8_avx2, "avx2", "avx2"};
    default:
      return {&a16_portable, &a16_portable, &a8_portable, &a8_portable, "portable", "portable"};
  }
}

// A static 2-D split of rows × panels into at most `threads` pieces: panels first (each thread
// keeps its weight slice), rows too when there are fewer panel pairs than threads.
struct Split {
  int64_t m_parts = 1, n_parts = 1;
};
Split split_work(int64_t M, int64_t panels, int threads, int64_t row_align) {
  Split s;
  const int64_t pairs = (panels + 1) / 2;
  s.n_parts = std::max<int64_t>(1, std::min<int64_t>(threads, pairs));
  const int64_t row_blocks = (M + row_align - 1) / row_align;
  s.m_parts = std::max<int64_t>(1, std::min<int64_t>(threads / s.n_parts, row_blocks));
  return s;
}

// A part of a call gets at least this many bytes of weight (times 16-row blocks of M): below it,
// waking one more thread costs more than the part saves.
constexpr int64_t kMinPartBytes = 32 << 10;

// Rows × panels of one part of a split (empty when the split has fewer units than parts).
struct Slice {
  int64_t m0 = 0, m1 = 0, p0 = 0, p1 = 0;
  bool empty() const { return m0 >= m1 || p0 >= p1; }
};
Slice slice_of(const Split& s, int64_t M, int64_t panels, int64_t row_align, int64_t part) {
  Slice out;
  if (part >= s.m_parts * s.n_parts) return out;
  const int64_t row_blocks = (M + row_align - 1) / row_align;
  const int64_t mi = part / s.n_parts, ni = part % s.n_parts;
  // Panels in pairs so a thread's slice starts on an even panel (two streams per pass).
  const int64_t pairs = (panels + 1) / 2;
  const int64_t pa = pairs * ni / s.n_parts, pb = pairs * (ni + 1) / s.n_parts;
  out.p0 = std::min(panels, 2 * pa);
  out.p1 = std::min(panels, 2 * pb);
  const int64_t b0 = row_blocks * mi / s.m_parts, b1 = row_blocks * (mi + 1) / s.m_parts;
  out.m0 = std::min(M, b0 * row_align);
  out.m1 = std::min(M, b1 * row_align);
  return out;
}

// A tile kernels' part is cut into at most this many units (sub_slice), a streaming part into
// kStreamUnitsPerPart (stream_unit): a part first runs its own units, then takes those of parts
// that are late (descheduled, or slowed by a neighbour).
constexpr int64_t kUnitsPerPart = 4;

// Unit `sub` of a tile kernels' slice. Along its panel pairs, each unit all of its rows and at
// least two pairs; or along its rows, each unit all of its pairs, where a part has at least
// 2·unit_rows rows (unit_rows > 0) and cutting its pairs would leave units of fewer than
// kRowUnitPairs pairs: the tile kernels read a unit's activations again for every few pairs, and at
// 16 threads units of two pairs each reread 1024 rows from L3 at every other pair. With fewer rows
// the units stay along pairs: one unit per part, and so no stealing, was slower than the rereading
// (docs/cpu_amx.md, Threads).
constexpr int64_t kRowUnitPairs = 4;
Slice sub_slice(const Slice& s, int64_t panels, int64_t sub, int64_t unit_rows, int64_t row_align) {
  Slice out = s;
  const int64_t rows = s.m1 - s.m0;
  const int64_t pairs = (s.p1 - s.p0 + 1) / 2;
  if (unit_rows > 0 && rows >= 2 * unit_rows && pairs < kRowUnitPairs * kUnitsPerPart) {
    const int64_t units = std::min<int64_t>(rows / unit_rows, kUnitsPerPart);
    if (sub >= units) return Slice{};
    const int64_t blocks = (rows + row_align - 1) / row_align;
    out.m0 = std::min(s.m1, s.m0 + row_align * (blocks * sub / units));
    out.m1 = std::min(s.m1, s.m0 + row_align * (blocks * (sub + 1) / units));
    return out;
  }
  const int64_t units = std::clamp<int64_t>(pairs / 2, 1, kUnitsPerPart);
  if (sub >= units) return Slice{};
  out.p0 = std::min(s.p1, s.p0 + 2 * (pairs * sub / units));
  out.p1 = std::min({s.p1, panels, s.p0 + 2 * (pairs * (sub + 1) / units)});
  return out;
}

// A streaming call's part is cut into up to this many units of one panel pair or more
// (stream_unit), which the kernels read two panels at a time where a unit has one pair. 4 units
// of two pairs or more (so that they read four at a time) left a tail of parts still streaming
// their last unit while the rest waited: at 16 threads 8 units were up to 11 % faster than 4
// (0.99–1.11×) over M = 1 to 4 on four shapes where each part prepares its rows, and 1.05–1.10×
// on 14336×4096 at M = 1–4 where the parts share them; 16 units were 4–7 % slower on 2048×2048
// (docs/cpu_amx.md, Threads).
constexpr int64_t kStreamUnitsPerPart = 8;

// Unit `sub` of a streaming slice: an equal share of its panel pairs, at least one pair.
Slice stream_unit(const Slice& s, int64_t panels, int64_t sub) {
  Slice out = s;
  const int64_t pairs = (s.p1 - s.p0 + 1) / 2;
  const int64_t units = std::clamp<int64_t>(pairs, 1, kStreamUnitsPerPart);
  if (sub >= units) return Slice{};
  out.p0 = std::min(s.p1, s.p0 + 2 * (pairs * sub / units));
  out.p1 = std::min({s.p1, panels, s.p0 + 2 * (pairs * (sub + 1) / units)});
  return out;
}

void wait_until(const std::atomic<int64_t>& counter, int64_t value) {
  for (unsigned n = 0; counter.load(std::memory_order_acquire) < value; ++n)
    if (n < (1u << 14))
      _mm_pause();
    else
      std::this_thread::yield();
}

// The split of a call: as many parts as the threads, but none of under kMinPartBytes of weight.
Split split_call(int64_t M, int64_t panels, int64_t weight_bytes, int threads, int64_t row_align) {
  const int64_t row_work = (M + 15) / 16;
  const int64_t by_bytes = std::max<int64_t>(1, weight_bytes * row_work / kMinPartBytes);
  return split_work(M, panels, int(std::min<int64_t>(threads, by_bytes)), row_align);
}

// One call of a linear layer on the pool: prepare(r0, r1) fills activation rows [r0, r1) in
// blocks, each part its own first and then those of parts not yet running, then compute(slice)
// runs the units of every part's slice. A block is claimed on its owner's cache line and the
// parts count their blocks done once each: with one shared counter for both, every block cost
// two read-modify-writes on the line all the other threads were polling.
// prepare(r0, r1, piece, pieces) fills rows [r0, r1), or with pieces > 1 that share of one row:
// where the parts outnumber the rows (decode), a row whose preparation can be cut
// (max_pieces > 1) is cut into up to max_pieces pieces, so that the threads waiting for it
// share it.
template <class Prepare, class Compute>
void run_linear(int64_t M, int64_t rows, int64_t panels, int64_t weight_bytes, int threads,
                int64_t row_align, bool tiles, int64_t unit_rows, int64_t max_pieces,
                const Prepare& prepare, const Compute& compute) {
  const Split s = split_call(M, panels, weight_bytes, threads, row_align);
  const int parts = int(s.m_parts * s.n_parts);
  if (parts == 1) {
    prepare(int64_t(0), rows, int64_t(0), int64_t(1));
    compute(slice_of(s, M, panels, row_align, 0));
    return;
  }
  const int64_t fill_rows = fill_block_rows(rows, parts);
  const int64_t pieces =
      fill_rows == 1 ? std::clamp<int64_t>(parts / std::max<int64_t>(1, rows), 1, max_pieces) : 1;
  const int64_t fill_blocks = (rows + fill_rows - 1) / fill_rows * pieces;
  struct alignas(64) Counter {
    std::atomic<int64_t> n{0};
  };
  // The parts add the blocks they filled to `filled`; the one that completes the count sets
  // `ready`, the line every waiting thread polls. With the pollers on the counter itself, each
  // part's addition had to take the line from all of them.
  Counter filled, ready;
  // Fewer blocks than parts (decode): the first parts own one each, the caller's part first.
  ItemQueues fills(int(std::min<int64_t>(parts, fill_blocks)), fill_blocks);
  const int64_t per_part = tiles ? kUnitsPerPart : kStreamUnitsPerPart;
  ItemQueues units(parts, parts * per_part);
  WorkerPool::instance().run(parts, [&](int part) {
    {
      // Blocks are counted done when claimed, and added when the part leaves this scope, even
      // by an exception, or the other threads would wait forever; the pool rethrows it.
      struct Done {
        std::atomic<int64_t>& total;
        std::atomic<int64_t>& ready;
        const int64_t all;
        int64_t n = 0;
        ~Done() {
          if (n > 0 && total.fetch_add(n, std::memory_order_acq_rel) + n == all)
            ready.store(1, std::memory_order_release);
        }
      } done{filled.n, ready.n, fill_blocks};
      fills.drain(part % fills.owners(), [&](int64_t b) {
        ++done.n;
        const int64_t r = b / pieces;
        prepare(fill_rows * r, std::min(rows, fill_rows * (r + 1)), b % pieces, pieces);
      });
    }
    wait_until(ready.n, 1);
    units.drain(part, [&](int64_t u) {
      const Slice whole = slice_of(s, M, panels, row_align, u / per_part);
      const Slice slice = tiles ? sub_slice(whole, panels, u % per_part, unit_rows, row_align)
                                : stream_unit(whole, panels, u % per_part);
      if (!slice.empty()) compute(slice);
    });
  });
}

// This thread's buffer for a call's activations, at least `bytes`, 64-byte aligned; kept, so a
// warm forward allocates nothing.
void* part_scratch(size_t bytes) {
  thread_local AlignedArray<uint8_t> buffer;
  if (buffer.size() < bytes) buffer = AlignedArray<uint8_t>(bytes, false);
  return buffer.data();
}

// One call with few rows, each part preparing all the rows itself: call_of(scratch) lays a call's
// activations out in `scratch` bytes, fill(call) prepares them, compute(call, slice) runs a unit
// (stream units, or the tile kernels' units where `tiles`). Prepared once and shared (run_linear),
// every part waited for the slowest piece and for the lines the pieces wrote to travel between the
// cores: a 2048×2048 decode call at 16 threads saw them ready 4.5–5.2 µs in, where preparing the
// whole row itself took a part 3.7–4.0 µs, and each part starts on its weights as soon as its own
// is done (docs/cpu_amx.md, Threads). A part's activations stay in its own cache.
template <class CallOf, class Fill, class Compute>
void run_linear_private(int64_t M, int64_t panels, int64_t weight_bytes, int threads,
                        int64_t row_align, bool tiles, size_t scratch, const CallOf& call_of,
                        const Fill& fill, const Compute& compute) {
  const Split s = split_call(M, panels, weight_bytes, threads, row_align);
  const int parts = int(s.m_parts * s.n_parts);
  if (parts == 1) {  // a small layer: one kernel call, no units to share
    const auto call = call_of(part_scratch(scratch));
    fill(call);
    compute(call, slice_of(s, M, panels, row_align, 0));
    return;
  }
  const int64_t per_part = tiles ? kUnitsPerPart : kStreamUnitsPerPart;
  ItemQueues units(parts, parts * per_part);
  auto run_part = [&](int part) {
    const auto call = call_of(part_scratch(scratch));
    fill(call);
    units.drain(part, [&](int64_t u) {
      const Slice slice = slice_of(s, M, panels, row_align, u / per_part);
      const Slice unit = tiles ? sub_slice(slice, panels, u % per_part, 0, row_align)
                               : stream_unit(slice, panels, u % per_part);
      if (!unit.empty()) compute(call, unit);
    });
  };
  WorkerPool::instance().run(parts, run_part);
}

}  // namespace

std::string quantized_mode_limits(const nibble_layer_desc& d, bool a16) {
  const int want = a16 ? NIBBLE_MODE_W4A16 : NIBBLE_MODE_W4A8;
  if (d.numeric_mode != want)
    return std::string("numeric mode ") + std::to_string(d.numeric_mode) +
           " requested; this kernel is " + (a16 ? "w4a16" : "w4a8");
  const uint32_t ok = NIBBLE_DTYPE_F32 | NIBBLE_DTYPE_F16 | NIBBLE_DTYPE_BF16;
  if (d.act_dtypes & ~ok) return "activation dtypes other than f32, f16, bf16";
  if (!sdk::is_float_dtype(d.weight_dtype))
    return "scales dtype " + sdk::dtype_name(d.weight_dtype) + " (expected f16, bf16 or f32)";
  return "";
}

// Rows up to this many run the streaming (GEMV-like) AVX-512 kernels even where AMX exists; above
// it the tile kernels. Measured on AMX machines (docs/cpu_amx.md): VDPBF16PS streaming wins only
// at M = 1 (its instruction rate, not memory, limits it from M = 2); VPDPBUSD streaming, W4A8's
// and W4A16's on fixed-point activations, up to M = 4. NIBBLE_CPU_AMX_SMALL_M (read at prepare)
// overrides it for benchmarks and tests.
int64_t streaming_row_limit(bool a16, int64_t fixed_rows, bool fixed_stream) {
  const int64_t vpdpbusd_rows = 4;
  const int64_t rows = !a16           ? vpdpbusd_rows
                       : fixed_stream ? std::clamp<int64_t>(fixed_rows, 1, vpdpbusd_rows)
                                      : int64_t(1);
  return sdk::env_integer("NIBBLE_CPU_AMX_SMALL_M", 0, int64_t(1) << 40).value_or(rows);
}

// NIBBLE_CPU_AMX_DEQUANT_M (read at prepare) overrides the crossover for benchmarks and tests.
int64_t dequant_row_threshold() {
  return sdk::env_integer("NIBBLE_CPU_AMX_DEQUANT_M", 0, int64_t(1) << 40).value_or(64);
}

// The tile kernels' units of work are cut along rows, this many or more each, where a part has
// at least twice as many rows and few panel pairs; otherwise along pairs (sub_slice).
// NIBBLE_CPU_AMX_UNIT_ROWS (read at prepare; 0 always cuts along pairs) overrides it for
// benchmarks and tests.
int64_t unit_row_minimum() {
  return sdk::env_integer("NIBBLE_CPU_AMX_UNIT_ROWS", 0, int64_t(1) << 40).value_or(256);
}

// 8 rows fill one A tile (two tile rows each). 9-16 rows take two, whose int8 products are as many
// as the bf16 tiles' at half the B-tile bytes but twice the C rows to stage and read: not faster
// at 2 or 16 threads on AMX machines (docs/cpu_amx.md, Kernels), so they stay on bf16 unless
// NIBBLE_CPU_AMX_FIXED_M (read at prepare, 0-kFixedTileRows; 0 turns the fixed point off) says so.
int64_t fixed_point_row_limit() {
  return sdk::env_integer("NIBBLE_CPU_AMX_FIXED_M", 0, kFixedTileRows).value_or(8);
}

// NIBBLE_CPU_AMX_FIXED_STREAM=0 (read at prepare) keeps one W4A16 row on bf16 activations and sends
// 2-4 to the int8 tiles.
bool fixed_point_streaming() {
  return sdk::env_integer("NIBBLE_CPU_AMX_FIXED_STREAM", 0, 1).value_or(1) == 1;
}

// Without AMX every row count streams on the fixed point: VPDPBUSD on the high and low bytes of
// each row, sharing each unpacked weight vector between the rows of a pass, against VDPBF16PS
// after three shifts and four ternary-logic ops per 64 weight bytes; on Zen 4 at 2 threads
// 1.15-1.4x faster at 2-1024 rows, up to 1.9x with 8-bit weights (docs/cpu_amx.md, Kernels).
int64_t fixed_point_rows(IsaLevel level) {
  if (level == IsaLevel::amx) return fixed_point_row_limit();
  if (level == IsaLevel::avx512 && fixed_point_streaming() && fixed_point_row_limit() > 0)
    return std::numeric_limits<int64_t>::max();
  return 0;
}

// Rows × padded K of the activations up to which each part of a streaming call prepares all the
// rows itself (run_linear_private) instead of a share of them. NIBBLE_CPU_AMX_PRIVATE_FILL (read
// at prepare; 0 shares them always) overrides it for benchmarks and tests.
int64_t private_fill_elements() {
  return sdk::env_integer("NIBBLE_CPU_AMX_PRIVATE_FILL", 0, int64_t(1) << 40).value_or(8192);
}

// The same for W4A16's bf16 rows on the tile kernels, up to 16 rows.
// NIBBLE_CPU_AMX_PRIVATE_TILE_FILL (read at prepare; 0 shares them always) overrides it for
// benchmarks and tests.
int64_t private_tile_fill_elements() {
  return sdk::env_integer("NIBBLE_CPU_AMX_PRIVATE_TILE_FILL", 0, int64_t(1) << 40).value_or(65536);
}

namespace {

class LinearPrepared final : public sdk::Prepared {
 public:
  LinearPrepared(Mode mode, std::unique_ptr<PackedLinear> w, IsaLevel level)
      : mode_(mode),
        w_(std::move(w)),
        level_(level),
        paths_(paths_for(level)),
        dequant_m_(dequant_row_threshold()),
        unit_rows_(unit_row_minimum()),
        fixed_m_(mode == Mode::a16 ? fixed_point_rows(level) : 0),
        fixed_stream_(fixed_point_streaming()),
        private_fill_(private_fill_elements()),
        private_tile_fill_(private_tile_fill_elements()) {
    small_m_ = streaming_row_limit(mode == Mode::a16, fixed_m_, fixed_stream_);
  }

  size_t bytes() const override { return w_->bytes(); }

  size_t workspace_bytes(int64_t M) const override {
    if (mode_ == Mode::a8) return a8_workspace_bytes(*w_, M);
    return std::max(a16_workspace_bytes(*w_, M),
                    fixed_point(M) ? a16_fixed_workspace_bytes(*w_, M) : size_t(0));
  }

  void forward(const sdk::ForwardArgs& args, const sdk::Exec& exec) const override {
    const int threads = std::max(1, exec.num_threads);
    const int64_t M = args.M;
    const int64_t bytes = int64_t(w_->bytes());
    OutputView y{args.y.data, args.y.stride, args.y.dtype, w_->N};
    const bool large = level_ == IsaLevel::amx && M > small_m_;
    // The tile kernels read whole 32-row blocks (zero padding rows) above 16 rows, one tile of
    // the slice's rows (all of M) up to 16; the streaming ones row M - 1 at most.
    const int64_t rows = large && M > 16 ? padded_rows(M) : M;
    const int64_t row_align = large ? kRowPad : 4;
    const int64_t unit_rows = large ? unit_rows_ : 0;
    // Few rows: each part prepares them itself (run_linear_private), on the tile kernels only
    // W4A16's bf16 rows (a copy, for bf16 inputs): the fixed-point and int8 rows, several
    // operations a value, were slower prepared by every part (docs/cpu_amx.md, Threads).
    const bool bf16_tiles = large && mode_ == Mode::a16 && !fixed_point(M);
    const int64_t own_budget = !large ? private_fill_ : bf16_tiles ? private_tile_fill_ : 0;
    const bool own_rows = M <= 16 && M * w_->Kp <= own_budget;
    // The call: every part preparing its own rows, or the parts sharing them in the workspace.
    // call_of(buffer) lays a call's activations out in a buffer of `scratch` bytes,
    // fill(call, r0, r1, piece, pieces) prepares rows [r0, r1) (or that piece of them).
    auto dispatch = [&](size_t scratch, int64_t call_unit_rows, int64_t max_pieces, auto fn,
                        const auto& call_of, const auto& fill) {
      auto compute = [&](const auto& c, const Slice& s) { fn(c, s.m0, s.m1, s.p0, s.p1); };
      if (own_rows) {
        run_linear_private(
            M, w_->panels, bytes, threads, row_align, large, scratch, call_of,
            [&](const auto& c) { fill(c, int64_t(0), rows, int64_t(0), int64_t(1)); }, compute);
        return;
      }
      const auto call = call_of(exec.workspace);
      run_linear(
          M, rows, w_->panels, bytes, threads, row_align, large, call_unit_rows, max_pieces,
          [&](int64_t a, int64_t b, int64_t piece, int64_t pieces) {
            fill(call, a, b, piece, pieces);
          },
          [&](const Slice& s) { compute(call, s); });
    };
    if (mode_ == Mode::a16 && fixed_point(M)) {
      dispatch(
          a16_fixed_workspace_bytes(*w_, M), 0, a16_fixed_fill_pieces(*w_),
          large ? paths_.a16_large : paths_.a16_small,
          [&](void* b) { return fixed_point_call(w_.get(), a16_fixed_view(*w_, M, b), y, M); },
          [&](const A16Call& c, int64_t a, int64_t b, int64_t piece, int64_t pieces) {
            a16_fixed_fill(args.x, *w_, c.fixed, a, b, level_, piece, pieces);
          });
    } else if (mode_ == Mode::a16) {
      dispatch(
          a16_workspace_bytes(*w_, M), unit_rows, 1, large ? paths_.a16_large : paths_.a16_small,
          [&](void* b) {
            A16Call c{w_.get(), a16_view(*w_, M, b), y, M};
            c.dequantize_b = M >= dequant_m_;
            return c;
          },
          [&](const A16Call& c, int64_t a, int64_t b, int64_t, int64_t) {
            a16_fill(args.x, *w_, c.x, a, b, level_);
          });
    } else {
      dispatch(
          a8_workspace_bytes(*w_, M), unit_rows, 1, large ? paths_.a8_large : paths_.a8_small,
          [&](void* b) {
            return A8Call{w_.get(), a8_view(*w_, M, b), y, M};
          },
          [&](const A8Call& c, int64_t a, int64_t b, int64_t, int64_t) {
            a8_fill(args.x, *w_, c.x, a, b, level_);
          });
    }
  }

 private:
  // Whether M rows take fixed-point activations (AMX, at most fixed_m_): on the int8 tiles above
  // the streaming rows, in the AVX-512 streaming kernel at and below them.
  bool fixed_point(int64_t M) const { return M <= fixed_m_ && (M > small_m_ || fixed_stream_); }

  Mode mode_;
  std::unique_ptr<PackedLinear> w_;
  IsaLevel level_;
  Paths paths_;
  int64_t small_m_;
  int64_t dequant_m_;
  int64_t unit_rows_;
  int64_t fixed_m_;
  bool fixed_stream_;
  int64_t private_fill_;
  int64_t private_tile_fill_;
};

class LinearKernel final : public sdk::Kernel {
 public:
  explicit LinearKernel(Mode mode) : mode_(mode) {}

  sdk::KernelInfo info() const override {
    sdk::KernelInfo i;
    i.op = NIBBLE_OP_LINEAR;
    if (mode_ == Mode::a16) {
      // Activations rounded to bf16 (f32/f16 inputs) and output rounding dominate; fp32 sums.
      i.name = "linear_a16";
      i.priority = 100;
      i.mode = NIBBLE_MODE_W4A16;
      i.bound_f32 = 1e-2;
      i.bound_f16 = 1e-2;
      i.bound_bf16 = 1e-2;
    } else {
      // Per-token int8 activations: ~0.5/127 of the row's largest value per element.
      i.name = "linear_a8";
      i.priority = 90;
      i.mode = NIBBLE_MODE_W4A8;
      i.bound_f32 = 3e-2;
      i.bound_f16 = 3e-2;
      i.bound_bf16 = 3e-2;
    }
    return i;
  }

  std::string why_not(const nibble_layer_desc& d) const override {
    if (d.op != NIBBLE_OP_LINEAR) return "only quantized linear layers (op LINEAR)";
    if (std::string why = quantized_mode_limits(d, mode_ == Mode::a16); !why.empty()) return why;
    return packing_limits(d);
  }

  std::unique_ptr<sdk::Prepared> prepare(const nibble_layer_desc& d,
                                         const nibble_weight_input& in) const override {
    sdk::QuantWeight w(*in.quantized, d.name ? d.name : "linear");
    sdk::require(w.K() == d.K && w.N() == d.N, "weight shape differs from the layer descriptor");
    sdk::require(w.bits() == d.bits, "weight bits differ from the layer descriptor");
    const IsaDecision isa = decide_isa();
    auto packed = pack_linear(w, sdk::Host::thread_budget());
    return std::make_unique<LinearPrepared>(mode_, std::move(packed), isa.level);
  }

 private:
  Mode mode_;
};

}  // namespace

void release_threads() {
  WorkerPool::instance().stop();
  // Join oneTBB's workers, unless something else in the process still holds the scheduler.
  tbb::task_scheduler_handle handle{tbb::attach{}};
  if (!tbb::finalize(handle, std::nothrow))
    sdk::Host::log(NIBBLE_LOG_DEBUG, "oneTBB workers stay: the scheduler is shared in-process");
}

std::unique_ptr<sdk::Kernel> make_linear_a16_kernel() {
  return std::make_unique<LinearKernel>(Mode::a16);
}
std::unique_ptr<sdk::Kernel> make_linear_a8_kernel() {
  return std::make_unique<LinearKernel>(Mode::a8);
}

}  // namespace nibble::cpu_amx
