// The fused MoE's work plan (plugins/cpu_amx/moe_plan.cpp, compiled into this test): the routing
// sort and the cost-balanced pieces. Every (expert, row block, panel) is covered exactly once, cuts
// fall on even panels, pieces cost about the same however skewed the routing, and bad ids are
// refused with the slot named.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <tuple>

#include "moe_plan.hpp"

namespace nibble::cpu_amx {
namespace {

double cost_of(const std::vector<GemmTask>& piece, const std::vector<Unit>& units) {
  double c = 0;
  for (const GemmTask& t : piece)
    for (const Unit& u : units)
      if (u.expert == t.expert && u.m0 == t.m0) c += u.cost * double(t.p1 - t.p0);
  return c;
}

void check_plan(const std::vector<Unit>& units, int64_t count, double tolerance,
                GemmPieces& pieces) {
  split_pieces(units, count, pieces);
  ASSERT_EQ(pieces.size(), count);
  std::map<std::tuple<int32_t, int64_t, int64_t>, int> covered;  // (expert, m0, panel)
  double total = 0, largest_unit_panel = 0;
  for (const Unit& u : units) {
    total += u.cost * double(u.panels);
    largest_unit_panel = std::max(largest_unit_panel, 2 * u.cost);
  }
  for (const auto& piece : pieces) {
    for (const GemmTask& t : piece) {
      EXPECT_LT(t.p0, t.p1);
      EXPECT_EQ(t.p0 % 2, 0) << "a cut must fall on an even panel";
      for (int64_t p = t.p0; p < t.p1; ++p) ++covered[{t.expert, t.m0, p}];
    }
    // Each piece is within the tolerance (plus one panel pair of rounding) of the mean.
    EXPECT_NEAR(cost_of(piece, units), total / double(count),
                tolerance * total / double(count) + largest_unit_panel);
  }
  size_t expected = 0;
  for (const Unit& u : units) {
    expected += size_t(u.panels);
    for (int64_t p = 0; p < u.panels; ++p)
      EXPECT_EQ((covered[{u.expert, u.m0, p}]), 1) << "expert " << u.expert << " panel " << p;
  }
  EXPECT_EQ(covered.size(), expected);
}

TEST(MoePlan, PiecesCoverEveryPanelOnceAndCostTheSame) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<Unit> units;
    const int experts = 1 + int(rng() % 64);
    for (int e = 0; e < experts; ++e) {
      const int64_t rows = 1 + int64_t(rng() % 150);
      const int64_t panels = 1 + int64_t(rng() % 200);
      for (int64_t m0 = 0; m0 < rows; m0 += 64) {
        const int64_t m1 = std::min(rows, m0 + 64);
        units.push_back(Unit{e, m0, m1, panels, 1.0 + double(m1 - m0) / 8});
      }
    }
    // One GemmPieces for every plan, as a forward reuses it: fewer pieces after more must not
    // keep segments of the earlier plan.
    GemmPieces pieces;
    for (int64_t count : {16, 1, 3, 2, 16}) check_plan(units, count, 0.05, pieces);
  }
}

TEST(MoePlan, OneHotExpertIsSharedByEveryPiece) {
  // Skewed routing: every row to one expert of 1792 panels (Mixtral's w13), 64-row blocks.
  std::vector<Unit> units;
  for (int64_t m0 = 0; m0 < 256; m0 += 64) units.push_back(Unit{7, m0, m0 + 64, 1792, 9.0});
  GemmPieces pieces;
  split_pieces(units, 16, pieces);
  for (const auto& piece : pieces) EXPECT_FALSE(piece.empty());
  check_plan(units, 16, 0.01, pieces);
}

TEST(MoePlan, SortsByExpertStablyAndRefusesBadIds) {
  // 3 tokens, top-2: ids {2, 0}, {-1, 2}, {0, 1}; 3 experts.
  int32_t ids[] = {2, 0, -1, 2, 0, 1};
  sdk::Matrix m{reinterpret_cast<char*>(ids), DLDataType{kDLInt, 32, 1}, 3, 2, 2};
  SortedRouting s;
  sort_by_expert(m, 3, 2, 3, s);
  EXPECT_EQ(s.rows, 5);
  EXPECT_EQ(s.experts_used, 3);
  EXPECT_EQ(s.begin, (std::vector<int64_t>{0, 2, 3, 5}));
  EXPECT_EQ(s.row_token, (std::vector<int64_t>{0, 2, 2, 0, 1}));  // token order within an expert
  EXPECT_EQ(s.slot_row, (std::vector<int64_t>{3, 0, -1, 4, 1, 2}));
  // Sorting again into the same SortedRouting gives the same answer.
  sort_by_expert(m, 3, 2, 3, s);
  EXPECT_EQ(s.rows, 5);
  EXPECT_EQ(s.row_token, (std::vector<int64_t>{0, 2, 2, 0, 1}));
  ids[3] = 3;
  try {
    sort_by_expert(m, 3, 2, 3, s);
    FAIL() << "an id of 3 with 3 experts was accepted";
  } catch (const sdk::PluginError& e) {
    EXPECT_NE(std::string(e.what()).find("topk_ids[1, 1] = 3"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace nibble::cpu_amx
