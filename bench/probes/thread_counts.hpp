// The thread counts a probe runs at, from its "1,2,16" argument.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

/// The comma-separated counts of `list` (each at least 1), or {1, 16} without one.
inline std::vector<int> thread_counts(const char* list) {
  if (list == nullptr) return {1, 16};
  std::vector<int> counts;
  const std::string s = list;
  for (size_t at = 0; at < s.size();) {
    const size_t end = std::min(s.find(',', at), s.size());
    counts.push_back(std::max(1, std::atoi(s.substr(at, end - at).c_str())));
    at = end + 1;
  }
  return counts;
}
