// Scanning the values a checkpoint's layers depend on for NaN and infinity (see
// find_suspect_values): open() checks shapes only, so that opening stays cheap.
#include <nibble/checkpoint.hpp>
#include <nibble/untrusted_text.hpp>

#include <fmt/format.h>

#include <cmath>

#include "text/name_text.hpp"

namespace nibble {
namespace {

bool is_float(DType d) {
  return d == DType::F16 || d == DType::BF16 || d == DType::F32 || d == DType::F64;
}

void scan_finite(const TensorView& t, const char* role, std::vector<std::string>& out) {
  if (!is_float(t.dtype)) return;
  const int64_t n = t.numel();
  int64_t bad = 0, first = -1;
  double first_value = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double v = t.as_double(size_t(i));
    if (std::isfinite(v)) continue;
    if (bad++ == 0) first = i, first_value = v;
  }
  if (bad == 0) return;
  out.push_back(
      fmt::format("tensor {} in {}: {} of {} {} are not finite (first: element {} = {}); "
                  "every output that uses them will be NaN or infinite",
                  detail::name_text(t.name), t.file, bad, n, role, first, first_value));
}

}  // namespace

std::vector<std::string> find_suspect_values(const Checkpoint& checkpoint) {
  std::vector<std::string> out;
  const TensorStore& store = checkpoint.tensors();
  for (const auto& name : store.names()) {
    if (!name.ends_with(".scales")) continue;
    const std::string prefix = name.substr(0, name.size() - 7);
    if (!store.find(prefix + ".qweight")) continue;
    scan_finite(*store.find(name), "scales", out);
  }
  for (const auto& block : checkpoint.moe_blocks()) {
    if (const TensorView* w = store.find(block.router_prefix + ".weight")) {
      scan_finite(*w, "router weights", out);
    }
  }
  return out;
}

}  // namespace nibble
