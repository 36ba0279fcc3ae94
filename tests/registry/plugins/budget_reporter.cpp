// Test backend "budget": says what the host's thread_budget returns for its load, in its probe
// detail (at load time) and in its kernel's refusal (at any later call), so a test can check that
// each Runtime's plugins see that Runtime's budget.
#include <nibble/sdk/plugin.hpp>

#include <memory>
#include <string>
#include <vector>

namespace {

std::string budget_text() {
  return "thread budget " + std::to_string(nibble::sdk::Host::thread_budget());
}

class BudgetKernel : public nibble::sdk::Kernel {
 public:
  nibble::sdk::KernelInfo info() const override {
    nibble::sdk::KernelInfo i;
    i.name = "report";
    return i;
  }
  std::string why_not(const nibble_layer_desc&) const override { return budget_text(); }
  std::unique_ptr<nibble::sdk::Prepared> prepare(const nibble_layer_desc&,
                                                 const nibble_weight_input&) const override {
    throw nibble::sdk::PluginError(NIBBLE_UNSUPPORTED, budget_text());
  }
};

struct Budget : nibble::sdk::Backend {
  static constexpr const char* name = "budget";
  static constexpr const char* version = "1.0.0";
  static constexpr const char* vendor = "nibble tests";
  static constexpr const char* description = "reports the thread budget its load sees";
  nibble::sdk::Probe probe() override { return {true, 0, budget_text()}; }
  std::vector<std::unique_ptr<nibble::sdk::Kernel>> make_kernels() override {
    std::vector<std::unique_ptr<nibble::sdk::Kernel>> k;
    k.push_back(std::make_unique<BudgetKernel>());
    return k;
  }
};

}  // namespace

NIBBLE_PLUGIN(Budget)
