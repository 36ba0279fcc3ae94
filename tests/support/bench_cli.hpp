// Running `nibble bench` in-process for the bench tests, and reading the JSON it writes.
#pragma once

#include "nibble_bench.hpp"

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace nibble::test {

/// `nibble bench <args>`; its exit code.
inline int bench(std::vector<std::string> args) {
  // oneDNN's OpenMP must not spin; set here so the bench does not re-execute this test binary.
  setenv("OMP_WAIT_POLICY", "passive", 1);
  args.insert(args.begin(), "bench");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return nibble_cmd_bench(int(argv.size()), argv.data());
}

/// The JSON document in file `p`.
inline nlohmann::json read_json(const std::filesystem::path& p) {
  std::ifstream f(p);
  return nlohmann::json::parse(f);
}

}  // namespace nibble::test
