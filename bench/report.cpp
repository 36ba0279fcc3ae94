// The bench report: results as JSON and CSV, and two charts drawn as SVG by hand (no plotting
// dependency): a roofline (achieved GFLOP/s against arithmetic intensity, under the measured
// read-bandwidth and AMX roofs) and the speed-up over oneDNN's bf16 matmul per M.
#include "report.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

namespace nibble::bench {

namespace {

double num(const nlohmann::json& j, const char* key, double fallback = 0) {
  if (!j.contains(key)) return fallback;
  const auto& v = j.at(key);
  if (v.is_number()) return v.get<double>();
  if (v.is_object() && v.contains("median") && v.at("median").is_number())
    return v.at("median").get<double>();
  return fallback;
}

std::string str(const nlohmann::json& j, const char* key) {
  return j.contains(key) && j.at(key).is_string() ? j.at(key).get<std::string>() : "";
}

std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '<')
      o += "&lt;";
    else if (c == '>')
      o += "&gt;";
    else if (c == '&')
      o += "&amp;";
    else if (c == '"')
      o += "&quot;";
    else
      o += c;
  }
  return o;
}

// A log-log or log-linear plot area with axes, ticks and a title.
struct Plot {
  double x0, x1, y0, y1;  // data range (logarithmic on both axes)
  int width = 760, height = 480, left = 80, right = 200, top = 50, bottom = 60;
  double px(double x) const {
    return left + (std::log10(x) - std::log10(x0)) / (std::log10(x1) - std::log10(x0)) *
                      (width - left - right);
  }
  double py(double y) const {
    return height - bottom -
           (std::log10(y) - std::log10(y0)) / (std::log10(y1) - std::log10(y0)) *
               (height - top - bottom);
  }
  void frame(std::ostringstream& s, const std::string& title, const std::string& xlabel,
             const std::string& ylabel) const {
    s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
      << "\" viewBox=\"0 0 " << width << " " << height << "\" font-family=\"sans-serif\">\n";
    s << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
    s << "<text x=\"" << width / 2 << "\" y=\"28\" text-anchor=\"middle\" font-size=\"17\">"
      << esc(title) << "</text>\n";
    s << "<rect x=\"" << left << "\" y=\"" << top << "\" width=\"" << width - left - right
      << "\" height=\"" << height - top - bottom << "\" fill=\"none\" stroke=\"#333\"/>\n";
    for (double t = std::pow(10, std::floor(std::log10(x0))); t <= x1 * 1.0001; t *= 10) {
      if (t < x0 * 0.9999) continue;
      s << "<line x1=\"" << px(t) << "\" y1=\"" << top << "\" x2=\"" << px(t) << "\" y2=\""
        << height - bottom << "\" stroke=\"#ddd\"/>\n<text x=\"" << px(t) << "\" y=\""
        << height - bottom + 18 << "\" text-anchor=\"middle\" font-size=\"12\">" << t
        << "</text>\n";
    }
    for (double t = std::pow(10, std::floor(std::log10(y0))); t <= y1 * 1.0001; t *= 10) {
      if (t < y0 * 0.9999) continue;
      s << "<line x1=\"" << left << "\" y1=\"" << py(t) << "\" x2=\"" << width - right << "\" y2=\""
        << py(t) << "\" stroke=\"#ddd\"/>\n<text x=\"" << left - 6 << "\" y=\"" << py(t) + 4
        << "\" text-anchor=\"end\" font-size=\"12\">" << t << "</text>\n";
    }
    s << "<text x=\"" << (left + width - right) / 2 << "\" y=\"" << height - 15
      << "\" text-anchor=\"middle\" font-size=\"13\">" << esc(xlabel) << "</text>\n";
    s << "<text transform=\"translate(20," << (top + height - bottom) / 2
      << ") rotate(-90)\" text-anchor=\"middle\" font-size=\"13\">" << esc(ylabel) << "</text>\n";
  }
};

const char* mode_color(const std::string& mode) { return mode == "w4a8" ? "#d95f02" : "#1b9e77"; }

void legend(std::ostringstream& s, const Plot& p, int row, const std::string& color,
            const std::string& text, bool dashed = false) {
  double x = p.width - p.right + 15, y = p.top + 10 + 20 * row;
  s << "<line x1=\"" << x << "\" y1=\"" << y << "\" x2=\"" << x + 22 << "\" y2=\"" << y
    << "\" stroke=\"" << color << "\" stroke-width=\"3\""
    << (dashed ? " stroke-dasharray=\"6 4\"" : "") << "/>\n<text x=\"" << x + 28 << "\" y=\""
    << y + 4 << "\" font-size=\"12\">" << esc(text) << "</text>\n";
}

// "KxN" for a linear case, the shape's name for a MoE case.
std::string case_name(const nlohmann::json& c) {
  if (c.contains("shape")) return "moe " + str(c, "shape");
  return std::to_string(int64_t(num(c, "K"))) + "x" + std::to_string(int64_t(num(c, "N")));
}

// " at T threads" when the run timed more than one thread count, so that its series stay apart.
std::string threads_suffix(const nlohmann::json& results, const nlohmann::json& c) {
  const bool several = results.contains("thread_counts") && results.at("thread_counts").size() > 1;
  if (!several || !c.contains("threads")) return "";
  return " at " + std::to_string(int64_t(num(c, "threads"))) + " threads";
}

}  // namespace

std::string roofline_svg(const nlohmann::json& results) {
  const auto& cases = results.at("cases");
  const double bw = num(results, "read_gbps");                // GB/s
  const double bf16 = num(results, "amx_bf16_tflops") * 1e3;  // GFLOP/s
  const double int8 = num(results, "amx_int8_tops") * 1e3;
  // The same tile loops reloading their operands (absent from runs before they were measured).
  const double bf16_loaded = num(results, "amx_bf16_loaded_tflops") * 1e3;
  const double int8_loaded = num(results, "amx_int8_loaded_tops") * 1e3;
  double xmin = 1e9, xmax = 0, ymin = 1e9, ymax = 0;
  struct Point {
    double x, y;
    std::string mode, label;
  };
  std::vector<Point> pts;
  for (const auto& c : cases) {
    double K = num(c, "K"), N = num(c, "N"), M = num(c, "M"), bytes = num(c, "weight_bytes");
    double secs = num(c, "seconds");
    if (K <= 0 || N <= 0 || M <= 0 || bytes <= 0 || secs <= 0) continue;
    // MoE cases carry their own FLOP count (routed rows) and a shape name.
    double flops = c.contains("flops") ? num(c, "flops") : 2 * M * K * N;
    Point p{flops / bytes, flops / secs / 1e9, str(c, "mode"),
            str(c, "backend") + " " + str(c, "mode") + " " + case_name(c) +
                " M=" + std::to_string(int64_t(M)) + threads_suffix(results, c)};
    pts.push_back(p);
    xmin = std::min(xmin, p.x);
    xmax = std::max(xmax, p.x);
    ymin = std::min(ymin, p.y);
    ymax = std::max(ymax, p.y);
  }
  if (pts.empty()) throw std::runtime_error("bench report: no case with timings to draw");
  ymax = std::max({ymax, bf16, int8, bw > 0 ? bw * xmin : 0.0});
  Plot p{std::pow(10, std::floor(std::log10(xmin))), std::pow(10, std::ceil(std::log10(xmax))),
         std::pow(10, std::floor(std::log10(ymin))),
         std::pow(10, std::ceil(std::log10(ymax * 1.01)))};
  std::ostringstream s;
  p.frame(s, "Roofline: achieved GFLOP/s against the measured limits",
          "arithmetic intensity (FLOP per weight byte)", "GFLOP/s (GOP/s for w4a8)");
  int row = 0;
  if (bw > 0) {
    // y = bw · x, clipped to the plot.
    double xa = p.x0, xb = std::min(p.x1, p.y1 / bw);
    s << "<line x1=\"" << p.px(xa) << "\" y1=\"" << p.py(std::max(bw * xa, p.y0)) << "\" x2=\""
      << p.px(xb) << "\" y2=\"" << p.py(bw * xb) << "\" stroke=\"#555\" stroke-width=\"2\"/>\n";
    legend(s, p, row++, "#555", "read " + std::to_string(int(bw + 0.5)) + " GB/s");
  }
  for (auto [peak, color, name, dash] :
       {std::tuple{bf16, "#1b9e77", "AMX bf16 peak", "6 4"},
        std::tuple{int8, "#d95f02", "AMX int8 peak", "6 4"},
        std::tuple{bf16_loaded, "#1b9e77", "AMX bf16, operands loaded", "2 3"},
        std::tuple{int8_loaded, "#d95f02", "AMX int8, operands loaded", "2 3"}}) {
    if (peak <= 0) continue;
    s << "<line x1=\"" << p.px(p.x0) << "\" y1=\"" << p.py(peak) << "\" x2=\"" << p.px(p.x1)
      << "\" y2=\"" << p.py(peak) << "\" stroke=\"" << color
      << "\" stroke-width=\"2\" stroke-dasharray=\"" << dash << "\"/>\n";
    legend(s, p, row++, color, std::string(name), true);
  }
  legend(s, p, row++, mode_color("w4a16"), "w4a16 cases");
  legend(s, p, row++, mode_color("w4a8"), "w4a8 cases");
  for (const auto& q : pts)
    s << "<circle cx=\"" << p.px(q.x) << "\" cy=\"" << p.py(q.y) << "\" r=\"5\" fill=\""
      << mode_color(q.mode) << "\" fill-opacity=\"0.8\"><title>" << esc(q.label)
      << "</title></circle>\n";
  s << "</svg>\n";
  return s.str();
}

std::string speedup_svg(const nlohmann::json& results) {
  const auto& cases = results.at("cases");
  struct Point {
    double m, speedup;
    std::string series;
  };
  std::vector<Point> pts;
  double mmax = 1, smin = 1, smax = 1;
  for (const auto& c : cases) {
    double M = num(c, "M"), sp = num(c, "speedup_onednn");
    if (M <= 0 || sp <= 0) continue;
    std::string series = case_name(c) + " " + str(c, "mode") + threads_suffix(results, c);
    pts.push_back({M, sp, series});
    mmax = std::max(mmax, M);
    smin = std::min(smin, sp);
    smax = std::max(smax, sp);
  }
  if (pts.empty()) throw std::runtime_error("bench report: no case has a oneDNN baseline");
  Plot p{1, std::pow(10, std::ceil(std::log10(mmax * 1.01))),
         std::pow(10, std::floor(std::log10(smin * 0.99))),
         std::pow(10, std::ceil(std::log10(smax * 1.01)))};
  std::ostringstream s;
  p.frame(s, "Speed-up over oneDNN bf16 matmul on the same layer", "M (tokens)",
          "speed-up (x), log scale");
  s << "<line x1=\"" << p.px(p.x0) << "\" y1=\"" << p.py(1) << "\" x2=\"" << p.px(p.x1)
    << "\" y2=\"" << p.py(1) << "\" stroke=\"#900\" stroke-width=\"1.5\"/>\n";
  std::map<std::string, std::vector<Point>> by_series;
  for (const auto& q : pts) by_series[q.series].push_back(q);
  const char* palette[] = {"#1b9e77", "#d95f02", "#7570b3", "#e7298a",
                           "#66a61e", "#e6ab02", "#a6761d", "#666666"};
  int row = 0;
  for (auto& [name, v] : by_series) {
    std::sort(v.begin(), v.end(), [](const Point& a, const Point& b) { return a.m < b.m; });
    const char* color = palette[row % 8];
    s << "<polyline fill=\"none\" stroke=\"" << color << "\" stroke-width=\"2\" points=\"";
    for (const auto& q : v) s << p.px(q.m) << "," << p.py(q.speedup) << " ";
    s << "\"/>\n";
    for (const auto& q : v)
      s << "<circle cx=\"" << p.px(q.m) << "\" cy=\"" << p.py(q.speedup) << "\" r=\"4\" fill=\""
        << color << "\"><title>" << esc(name) << " M=" << int64_t(q.m) << ": " << q.speedup
        << "x</title></circle>\n";
    legend(s, p, row++, color, name);
  }
  s << "</svg>\n";
  return s.str();
}

std::string results_csv(const nlohmann::json& results) {
  std::ostringstream s;
  s << "backend,kernel,mode,K,N,M,threads,median_s,min_s,max_s,weight_gbps,tflops,ratio_bandwidth,"
       "ratio_peak,onednn_bf16_s,speedup_onednn\n";
  for (const auto& c : results.at("cases")) {
    auto stat = [&](const char* key, const char* part) {
      return c.contains(key) && c.at(key).is_object() && c.at(key).contains(part)
                 ? c.at(key).at(part).get<double>()
                 : 0.0;
    };
    s << str(c, "backend") << "," << str(c, "kernel") << "," << str(c, "mode") << ","
      << int64_t(num(c, "K")) << "," << int64_t(num(c, "N")) << "," << int64_t(num(c, "M")) << ","
      << int64_t(num(c, "threads", num(results, "threads"))) << "," << stat("seconds", "median")
      << "," << stat("seconds", "min") << "," << stat("seconds", "max") << ","
      << num(c, "weight_gbps") << "," << num(c, "tflops") << "," << num(c, "ratio_bandwidth") << ","
      << num(c, "ratio_peak") << "," << num(c, "onednn_bf16_seconds") << ","
      << num(c, "speedup_onednn") << "\n";
  }
  return s.str();
}

void write_report(const nlohmann::json& results, const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  auto write = [&](const char* name, const std::string& text) {
    std::ofstream f(dir / name);
    f << text;
    if (!f) throw std::runtime_error("bench report: cannot write " + (dir / name).string());
  };
  write("results.json", results.dump(2) + "\n");
  write("results.csv", results_csv(results));
  write("roofline.svg", roofline_svg(results));
  bool any_onednn = false;
  for (const auto& c : results.at("cases")) any_onednn |= c.contains("speedup_onednn");
  if (any_onednn) write("speedup.svg", speedup_svg(results));
}

}  // namespace nibble::bench
