// MoE experts a host holds in memory, lent one at a time through nibble_moe_source. Every
// get_expert is counted against its put_expert, so a host can tell a plugin that asks for an
// expert that does not exist or never gives one back. Header-only.
#pragma once

#include <nibble/sdk/plugin.h>

#include <cstddef>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace nibble::sdk::host {

/// Views of w13[e] and w2[e] for every expert e, as a nibble_moe_source.
class ExpertViews {
 public:
  /// Lend these views (the weights they borrow must outlive this object).
  ExpertViews(std::vector<nibble_canonical_weight> w13, std::vector<nibble_canonical_weight> w2)
      : w13_(std::move(w13)), w2_(std::move(w2)), outstanding_(w13_.size(), 0) {
    source_.struct_size = sizeof source_;
    source_.num_experts = int32_t(w13_.size());
    source_.ctx = this;
    source_.get_expert = &get;
    source_.put_expert = &put;
  }
  ExpertViews(const ExpertViews&) = delete;
  ExpertViews& operator=(const ExpertViews&) = delete;

  /// The source to hand to prepare (points at this object).
  const nibble_moe_source& source() const { return source_; }
  /// Every expert's w13 view, in expert order.
  const std::vector<nibble_canonical_weight>& w13() const { return w13_; }
  /// Every expert's w2 view, in expert order.
  const std::vector<nibble_canonical_weight>& w2() const { return w2_; }
  /// The first misuse seen, or an expert still taken; "" when every get had its put.
  std::string misuse() const {
    if (!misuse_.empty()) return misuse_;
    for (size_t e = 0; e < outstanding_.size(); ++e)
      if (outstanding_[e] != 0)
        return "expert " + std::to_string(e) +
               " was taken with get_expert and never given back with put_expert";
    return "";
  }

 private:
  static nibble_status get(void* ctx, int32_t e, nibble_canonical_weight* w13,
                           nibble_canonical_weight* w2, nibble_error* error) {
    auto* self = static_cast<ExpertViews*>(ctx);
    if (e < 0 || size_t(e) >= self->w13_.size() || size_t(e) >= self->w2_.size()) {
      if (self->misuse_.empty())
        self->misuse_ = "get_expert(" + std::to_string(e) + ") is out of range";
      if (error && error->struct_size > offsetof(nibble_error, message) + 64)
        std::snprintf(error->message, 64, "expert %d out of range", int(e));
      return NIBBLE_INVALID_ARGUMENT;
    }
    *w13 = self->w13_[size_t(e)];
    *w2 = self->w2_[size_t(e)];
    ++self->outstanding_[size_t(e)];
    return NIBBLE_OK;
  }
  static void put(void* ctx, int32_t e) {
    auto* self = static_cast<ExpertViews*>(ctx);
    if (e < 0 || size_t(e) >= self->outstanding_.size() || self->outstanding_[size_t(e)] == 0) {
      if (self->misuse_.empty())
        self->misuse_ = "put_expert(" + std::to_string(e) + ") without a matching get_expert";
      return;
    }
    --self->outstanding_[size_t(e)];
  }

  std::vector<nibble_canonical_weight> w13_, w2_;
  std::vector<int> outstanding_;
  std::string misuse_;
  nibble_moe_source source_{};
};

}  // namespace nibble::sdk::host
