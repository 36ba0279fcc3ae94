// The bench report: JSON, CSV and two SVG charts (roofline, speed-up over oneDNN) from the
// results `nibble bench` collects.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>

namespace nibble::bench {

/// Write results.json, results.csv, roofline.svg and (when there is a oneDNN baseline)
/// speedup.svg into `dir`; throws std::runtime_error when a file cannot be written.
void write_report(const nlohmann::json& results, const std::filesystem::path& dir);

/// The roofline chart: achieved GFLOP/s of every case against its arithmetic intensity, under the
/// measured read-bandwidth line and AMX peaks.
std::string roofline_svg(const nlohmann::json& results);

/// Speed-up over oneDNN's bf16 matmul against M, one line per shape and mode.
std::string speedup_svg(const nlohmann::json& results);

/// One CSV row per case.
std::string results_csv(const nlohmann::json& results);

}  // namespace nibble::bench
