#include "targets.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

namespace nibble::bench {
namespace {

using nlohmann::json;

// A number of a case: the field itself, or the median of a {median, min, max} field; -1 if absent.
double number(const json& c, const char* key) {
  if (!c.contains(key)) return -1;
  const json& v = c.at(key);
  if (v.is_number()) return v.get<double>();
  if (v.is_object() && v.contains("median") && v.at("median").is_number())
    return v.at("median").get<double>();
  return -1;
}

// Runs written before thread lists carry one count at the top level only.
int threads_of(const json& c, const json& run) {
  if (c.contains("threads")) return c.at("threads").get<int>();
  return run.value("threads", 0);
}

bool is_moe(const json& c) { return c.value("kind", std::string()) == "moe"; }

std::string shape_of(const json& c) {
  if (is_moe(c)) return c.value("shape", std::string());
  return std::to_string(c.at("K").get<int64_t>()) + "x" + std::to_string(c.at("N").get<int64_t>());
}

struct Evaluation {
  json targets = json::array();
  std::vector<std::string> skipped;

  void add(const std::string& target, double value, double goal, const json& c, int threads) {
    json t;
    t["target"] = target;
    t["value"] = value;
    t["goal"] = goal;
    t["met"] = value >= goal;
    t["shape"] = shape_of(c);
    t["M"] = c.at("M");
    t["mode"] = c.at("mode");
    t["threads"] = threads;
    targets.push_back(t);
  }
  // One target over the cases `pick` selects, with `quantity` of each against `goal`;
  // `not_run` says what is skipped when no case is selected.
  template <class Pick>
  void over(const std::vector<json>& cases, const std::string& target, const char* quantity,
            double goal, int threads, Pick&& pick, const std::string& not_run) {
    bool any_case = false, any_value = false;
    for (const json& c : cases) {
      if (!pick(c)) continue;
      any_case = true;
      const double v = number(c, quantity);
      if (v < 0) continue;
      any_value = true;
      add(target, v, goal, c, threads);
    }
    if (!any_case)
      skipped.push_back(target + ": " + not_run);
    else if (!any_value) {
      const std::string q = quantity;  // a dense baseline is off only with --no-onednn
      const bool dense =
          q.find("onednn") != std::string::npos || q.find("dense") != std::string::npos;
      skipped.push_back(target + ": the run has no " + q + " (" +
                        (dense ? "--no-onednn" : "no AMX peaks on this machine") + ")");
    }
  }
};

void linear_targets(const std::vector<json>& all, const std::vector<json>& top, int most,
                    int fewest, Evaluation& e) {
  const std::string at = " at " + std::to_string(most) + " threads";
  // M = 1 against the read bandwidth, on the shapes that name it.
  for (auto [K, N, goal] : {std::tuple{2048, 2048, 0.80}, std::tuple{4096, 4096, 0.90},
                            std::tuple{4096, 14336, 0.90}, std::tuple{14336, 4096, 0.90}}) {
    const std::string shape = std::to_string(K) + "x" + std::to_string(N);
    e.over(
        top, "m1_bandwidth", "ratio_bandwidth", goal, most,
        [&](const json& c) { return c.at("M") == 1 && c.at("K") == K && c.at("N") == N; },
        "no M=1 case on " + shape + at);
  }
  e.over(
      top, "m4_bandwidth", "ratio_bandwidth", 0.80, most,
      [](const json& c) { return c.at("M") == 4; }, "no M=4 case" + at);
  e.over(
      top, "m16_bandwidth", "ratio_bandwidth", 0.70, most,
      [](const json& c) { return c.at("M") == 16; }, "no M=16 case" + at);
  auto large = [](const json& c, const char* mode) {
    return c.at("mode") == mode && (c.at("M") == 256 || c.at("M") == 1024);
  };
  e.over(
      top, "w4a16_over_onednn", "speedup_onednn", 1.5, most,
      [&](const json& c) { return large(c, "w4a16"); }, "no w4a16 case at M=256 or 1024" + at);
  e.over(
      top, "w4a16_loaded_bf16_ceiling", "ratio_loaded_peak", 0.45, most,
      [](const json& c) { return c.at("mode") == "w4a16" && c.at("M") == 1024; },
      "no w4a16 case at M=1024" + at);
  e.over(
      top, "w4a8_over_onednn", "speedup_onednn", 2.5, most,
      [&](const json& c) { return large(c, "w4a8"); }, "no w4a8 case at M=256 or 1024" + at);
  e.over(
      top, "w4a8_loaded_int8_ceiling", "ratio_loaded_peak", 0.40, most,
      [](const json& c) { return c.at("mode") == "w4a8" && c.at("M") == 1024; },
      "no w4a8 case at M=1024" + at);

  // M = 1 time against the bandwidth from the fewest threads to each higher count: the speed-up
  // over the bandwidth's own gain.
  if (most == fewest) {
    e.skipped.push_back("m1_scaling: the run has one thread count");
    return;
  }
  std::map<std::pair<std::string, std::string>, std::map<int, const json*>> m1;
  for (const json& c : all)
    if (c.at("M") == 1) m1[{shape_of(c), c.at("mode").get<std::string>()}][c.at("threads")] = &c;
  bool any = false;
  for (const auto& [key, by_count] : m1) {
    auto base = by_count.find(fewest);
    if (base == by_count.end()) continue;
    const double t0 = number(*base->second, "seconds"), bw0 = number(*base->second, "read_gbps");
    for (const auto& [count, c] : by_count) {
      if (count == fewest) continue;
      const double t = number(*c, "seconds"), bw = number(*c, "read_gbps");
      if (t <= 0 || bw <= 0 || t0 <= 0 || bw0 <= 0) continue;
      e.add("m1_scaling", (t0 / t) / (bw / bw0), 0.85, *c, count);
      e.targets.back()["from_threads"] = fewest;
      any = true;
    }
  }
  if (!any) e.skipped.push_back("m1_scaling: no M=1 case at two thread counts");
}

// A backend whose kernels run on a device (a GPU): its own dense kernel on the bf16 weight on the
// same device (cuBLAS for cuda) is the yardstick, not the host's bandwidth or oneDNN.
void device_linear_targets(const std::vector<json>& top, int most, const std::string& device,
                           Evaluation& e) {
  const std::string on = " on " + device;
  for (auto [K, N, goal] :
       {std::tuple{4096, 4096, 2.0}, std::tuple{4096, 14336, 3.0}, std::tuple{14336, 4096, 3.0}}) {
    const std::string shape = std::to_string(K) + "x" + std::to_string(N);
    e.over(
        top, "device_small_m_over_dense", "speedup_dense", goal, most,
        [&](const json& c) {
          return c.at("M") >= 1 && c.at("M") <= 16 && c.at("K") == K && c.at("N") == N;
        },
        "no case with M <= 16 on " + shape + on);
  }
  e.over(
      top, "device_large_m_over_dense", "speedup_dense", 0.9, most,
      [](const json& c) { return c.at("M") == 256 || c.at("M") == 1024; },
      "no case at M=256 or 1024" + on);
}

void moe_targets(const std::vector<json>& top, int most, Evaluation& e) {
  const std::string at = " at " + std::to_string(most) + " threads";
  e.over(
      top, "moe_decode_routed_bandwidth", "ratio_bandwidth", 0.80, most,
      [](const json& c) { return c.at("M") == 1; }, "no M=1 case" + at);
  e.over(
      top, "moe_fused_over_loop", "speedup_loop", 1.2, most,
      [](const json& c) { return c.at("M") == 1; }, "no M=1 case" + at);
  e.over(
      top, "moe_fused_over_loop", "speedup_loop", 2.0, most,
      [](const json& c) { return c.at("M") >= 16; }, "no case with M >= 16" + at);
}

}  // namespace

json evaluate_targets(const json& run) {
  Evaluation e;
  std::vector<json> linear, moe;
  std::set<int> counts;
  for (const json& c : run.at("cases")) {
    json t = c;
    t["threads"] = threads_of(c, run);
    counts.insert(t["threads"].get<int>());
    (is_moe(c) ? moe : linear).push_back(t);
  }
  if (counts.empty()) {
    e.skipped.push_back("every target: the run has no case");
  } else {
    const int most = *counts.rbegin(), fewest = *counts.begin();
    auto at_most = [&](const std::vector<json>& v) {
      std::vector<json> out;
      for (const json& c : v)
        if (c.at("threads") == most) out.push_back(c);
      return out;
    };
    const std::string device = run.value("device", std::string());
    if (linear.empty())
      e.skipped.push_back("linear targets: no linear case (a run without --moe)");
    else if (!device.empty())
      device_linear_targets(at_most(linear), most, device, e);
    else
      linear_targets(linear, at_most(linear), most, fewest, e);
    if (!moe.empty())
      moe_targets(at_most(moe), most, e);
    else if (device.empty())  // the MoE bench does not run on a device
      e.skipped.push_back("MoE targets: no MoE case (a run with --moe)");
    if (!device.empty())
      e.skipped.push_back(
          "host targets (read bandwidth, oneDNN, AMX ceilings, thread scaling): "
          "a run on " +
          device + " is judged against its own dense kernel");
  }
  return {{"targets", e.targets}, {"skipped", e.skipped}};
}

void print_targets(const json& evaluated) {
  std::printf("\ntargets:\n");
  for (const json& t : evaluated.at("targets")) {
    std::string where = t.at("shape").get<std::string>() + " M=" + t.at("M").dump() + " " +
                        t.at("mode").get<std::string>() + ", " + t.at("threads").dump() +
                        " threads";
    if (t.contains("from_threads")) where += " over " + t.at("from_threads").dump();
    std::printf("  %-27s %-36s %7.3f (goal >= %.2f) %s\n",
                t.at("target").get<std::string>().c_str(), where.c_str(),
                t.at("value").get<double>(), t.at("goal").get<double>(),
                t.at("met").get<bool>() ? "met" : "not met");
  }
  for (const json& s : evaluated.at("skipped"))
    std::printf("  skipped: %s\n", s.get<std::string>().c_str());
}

}  // namespace nibble::bench
