// Threads across a plugin's life. Entry never starts a thread; a CPU plugin's probe starts none;
// shutdown joins every thread the plugin started. A device runtime is the exception the kit
// allows: initialising it (CUDA's driver does so on the first device query) may start threads
// that belong to the process, not to the plugin, and live until exit. The kit cannot tell those
// threads from the plugin's own by looking at them, so it tells them apart by behaviour: it loads
// the plugin a second time in the same process, probes it, runs a layer on its device, shuts it
// down, and requires that this adds no thread. Threads a plugin starts per load, or per forward,
// and forgets would be there twice.
#include <chrono>
#include <thread>

#include "suite.hpp"

namespace nibble::conformance {

namespace {

// The thread count once threads that are exiting have gone (up to 2 s), or the last count seen.
int settled_thread_count(int at_most) {
  int now = thread_count();
  for (int i = 0; i < 100 && now > at_most; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    now = thread_count();
  }
  return now;
}

// Run one forward of a small linear layer on the first device kernel of `p` that takes it.
// Returns "" or what failed.
std::string run_one_device_layer(const nibble_plugin& p) {
  QuantSpec spec;
  spec.K = 256;
  spec.N = 64;
  spec.seed = 23;
  const CanonicalWeight w = random_weight(spec);
  for (const nibble_kernel* k : kernels_of(p)) {
    if (!k || k->op != NIBBLE_OP_LINEAR || !sdk::host::is_device_kernel(k)) continue;
    for (uint32_t flag : {NIBBLE_DTYPE_BF16, NIBBLE_DTYPE_F16, NIBBLE_DTYPE_F32}) {
      nibble_layer_desc d = linear_desc(w, "conformance.second_load");
      d.numeric_mode = k->numeric_mode;
      d.act_dtypes = flag;
      bool accepted = false;
      why_not(k, d, &accepted);
      if (!accepted) continue;
      nibble_status status = NIBBLE_OK;
      std::string message;
      auto layer = prepare_linear(k, d, w, &status, &message);
      if (!layer) return std::string("prepare on ") + k->name + " failed: " + message;
      Activations a = random_activations(1, spec.K, dtype_of_flag(flag), 5);
      auto x = tensor_of(a);
      Tensor2D y(1, spec.N, a.dtype);
      if (layer->forward(&x->t, &y.t, nullptr, nullptr, 1, &message) != NIBBLE_OK)
        return std::string("forward on ") + k->name + " failed: " + message;
      return "";
    }
  }
  return "";  // no device linear layer of this shape: entry, probe and shutdown still ran
}

// A second load of the plugin under test, used and ended. Returns "" or what failed.
std::string second_load(const SuiteContext& ctx) {
  nibble_plugin again{};
  std::string message;
  if (call_entry(ctx.plugin, &again, sizeof again, &message) != NIBBLE_OK)
    return "the second entry call failed: " + message;
  std::string problem;
  nibble_probe_result probe{};
  probe.struct_size = sizeof probe;
  if (!guarded("probe", [&] { sdk::host::probe_load(again, &probe); }))
    problem = "a C++ exception escaped the second load's probe";
  if (problem.empty() && probe.available) {
    // The first load is over (this check comes last): the kit stages through this one now.
    stage_on_device_of(again);
    problem = run_one_device_layer(again);
  }
  if (!guarded("shutdown", [&] { sdk::host::shutdown_load(again); }) && problem.empty())
    problem = "a C++ exception escaped the second load's shutdown";
  return problem;
}

bool has_device_kernels(const nibble_plugin& p) {
  for (const nibble_kernel* k : kernels_of(p))
    if (k && sdk::host::is_device_kernel(k)) return true;
  return false;
}

}  // namespace

void check_threads(const SuiteContext& ctx, CheckResult& r) {
  if (ctx.threads_after_entry != ctx.threads_before_load) {
    r.passed = false;
    r.message = "loading and the entry point went from " + std::to_string(ctx.threads_before_load) +
                " to " + std::to_string(ctx.threads_after_entry) + " threads";
    return;
  }
  const int started = ctx.threads_after_probe - ctx.threads_after_entry;
  if (started == 0) {
    r.message = "entry and probe started no thread";
  } else if (started > 0 && has_device_kernels(ctx.plugin.desc)) {
    r.message = "probe started " + std::to_string(started) +
                " thread(s), allowed as the device runtime's; lifecycle/shutdown checks that a "
                "second load adds none";
  } else {
    r.passed = false;
    r.message = "probe went from " + std::to_string(ctx.threads_after_entry) + " to " +
                std::to_string(ctx.threads_after_probe) + " threads";
  }
}

void check_shutdown(const SuiteContext& ctx, CheckResult& r) {
  const int before = thread_count();
  // Asked before shutdown, which ends the descriptors' lifetime.
  const bool device_plugin = has_device_kernels(ctx.plugin.desc);
  // The load's own shutdown2 when the plugin has loads (ABI 1.2), else shutdown.
  if (!guarded("shutdown", [&] { sdk::host::shutdown_load(ctx.plugin.desc); })) {
    r.passed = false;
    r.message = "a C++ exception escaped shutdown";
    return;
  }
  const int after = settled_thread_count(ctx.threads_before_load);
  const int left = after - ctx.threads_before_load;
  if (left <= 0) {
    r.message = std::to_string(before - ctx.threads_before_load) +
                " plugin thread(s) before shutdown, none after";
    return;
  }
  const std::string counts = " (" + std::to_string(before) + " threads before shutdown, " +
                             std::to_string(ctx.threads_before_load) +
                             " before the plugin was loaded)";
  if (!device_plugin) {
    r.passed = false;
    r.message = std::to_string(left) + " threads the plugin started are still running 2 s after " +
                "shutdown" + counts;
    return;
  }
  const std::string problem = second_load(ctx);
  const int again = settled_thread_count(after);
  if (again > after) {
    r.passed = false;
    r.message = std::to_string(left) + " thread(s) outlived shutdown" + counts +
                ", and a second load (entry, probe, a layer on the device, shutdown) left " +
                std::to_string(again - after) +
                " more: threads the plugin starts must end with its shutdown";
  } else if (!problem.empty()) {
    r.passed = false;
    r.message =
        std::to_string(left) + " thread(s) outlived shutdown" + counts +
        "; the second load that would show them to be the device runtime's failed: " + problem;
  } else {
    r.message = std::to_string(left) + " thread(s) outlived shutdown" + counts +
                ", and a second load (entry, probe, a layer on the device, shutdown) added "
                "none: the device runtime's, which live as long as the process";
  }
}

}  // namespace nibble::conformance
