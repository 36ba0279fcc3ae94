#include "moe_plan.hpp"

#include <algorithm>
#include <cmath>
#include <string>

namespace nibble::cpu_amx {

void sort_by_expert(const sdk::Matrix& ids, int64_t M, int64_t top_k, int64_t E, SortedRouting& s) {
  s.begin.assign(size_t(E) + 1, 0);
  s.rows = s.experts_used = 0;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t j = 0; j < top_k; ++j) {
      const int64_t e = ids.get_int(m, j);
      if (e < -1 || e >= E)
        throw sdk::PluginError(NIBBLE_INVALID_ARGUMENT,
                               "topk_ids[" + std::to_string(m) + ", " + std::to_string(j) +
                                   "] = " + std::to_string(e) + " is outside [0, " +
                                   std::to_string(E) + ") (or -1 for no expert)");
      if (e >= 0) ++s.begin[size_t(e) + 1];
    }
  for (int64_t e = 0; e < E; ++e) {
    if (s.begin[size_t(e) + 1] > 0) ++s.experts_used;
    s.begin[size_t(e) + 1] += s.begin[size_t(e)];
  }
  s.rows = s.begin[size_t(E)];
  s.next.assign(s.begin.begin(), s.begin.end() - 1);
  s.slot_row.assign(size_t(M * top_k), -1);
  s.row_token.resize(size_t(s.rows));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t j = 0; j < top_k; ++j) {
      const int64_t e = ids.get_int(m, j);
      if (e < 0) continue;
      const int64_t r = s.next[size_t(e)]++;
      s.slot_row[size_t(m * top_k + j)] = r;
      s.row_token[size_t(r)] = m;
    }
}

void split_pieces(const std::vector<Unit>& units, int64_t count, GemmPieces& pieces) {
  pieces.reset(std::max<int64_t>(1, count));
  const int64_t last = int64_t(pieces.size()) - 1;
  double total = 0;
  for (const Unit& u : units) total += u.cost * double(u.panels);
  const double per = total / double(pieces.size());
  double done = 0;
  int64_t piece = 0;
  for (const Unit& u : units) {
    int64_t p = 0;
    while (p < u.panels) {
      int64_t take = u.panels - p;
      if (piece < last) {
        int64_t fit = int64_t(std::llround((per * double(piece + 1) - done) / u.cost));
        fit += fit & 1;
        if (fit <= 0) {
          ++piece;
          continue;
        }
        take = std::min(take, fit);
      }
      pieces.add(piece, GemmTask{u.expert, u.m0, u.m1, p, p + take});
      done += u.cost * double(take);
      p += take;
      if (piece < last && done >= per * double(piece + 1)) ++piece;
    }
  }
}

}  // namespace nibble::cpu_amx
