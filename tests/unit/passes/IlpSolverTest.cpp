// The sharding search's 0-1 programs as the solver receives them: equalities pick one strategy,
// "at most" rows bound sums, repeated terms add up, and an impossible program says so.
#include "passes/IlpSolver.h"

#include <gtest/gtest.h>

namespace {

TEST(IlpSolverTest, PicksTheCheapestOfOneChoice) {
  cpc::IlpProblem p;
  int a = p.addVariable(3.0, true), b = p.addVariable(1.0, true), c = p.addVariable(2.0, true);
  p.addEquality({{a, 1.0}, {b, 1.0}, {c, 1.0}}, 1.0);
  cpc::IlpProblem::Solution s;
  std::string why;
  ASSERT_TRUE(p.solve(10.0, s, why)) << why;
  EXPECT_TRUE(s.optimal);
  EXPECT_DOUBLE_EQ(s.objective, 1.0);
  EXPECT_NEAR(s.values[b], 1.0, 1e-9);
  EXPECT_NEAR(s.values[a] + s.values[c], 0.0, 1e-9);
}

TEST(IlpSolverTest, AnUpperBoundRowExcludesTheCheapest) {
  // b is cheapest but costs 5 units of a budget of 4: the next cheapest, c, is chosen.
  cpc::IlpProblem p;
  int a = p.addVariable(3.0, true), b = p.addVariable(1.0, true), c = p.addVariable(2.0, true);
  p.addEquality({{a, 1.0}, {b, 1.0}, {c, 1.0}}, 1.0);
  p.addAtMost({{b, 2.0}, {b, 3.0}, {c, 4.0}}, 4.0); // b's two terms add to 5
  cpc::IlpProblem::Solution s;
  std::string why;
  ASSERT_TRUE(p.solve(10.0, s, why)) << why;
  EXPECT_DOUBLE_EQ(s.objective, 2.0);
  EXPECT_NEAR(s.values[c], 1.0, 1e-9);
}

TEST(IlpSolverTest, AContinuousVariableTakesWhatTheRowsLeave) {
  // x >= a + b - 1 (an edge's pair variable, Alpa's linearization), both chosen: x = 1.
  cpc::IlpProblem p;
  int a = p.addVariable(0.0, true), b = p.addVariable(0.0, true), x = p.addVariable(7.0, false);
  p.addEquality({{a, 1.0}}, 1.0);
  p.addEquality({{b, 1.0}}, 1.0);
  p.addAtMost({{a, 1.0}, {b, 1.0}, {x, -1.0}}, 1.0);
  cpc::IlpProblem::Solution s;
  std::string why;
  ASSERT_TRUE(p.solve(10.0, s, why)) << why;
  EXPECT_NEAR(s.values[x], 1.0, 1e-9);
  EXPECT_NEAR(s.objective, 7.0, 1e-9);
}

TEST(IlpSolverTest, AnImpossibleProgramSaysSo) {
  cpc::IlpProblem p;
  int a = p.addVariable(1.0, true);
  p.addEquality({{a, 1.0}}, 1.0);
  p.addAtMost({{a, 1.0}}, 0.0);
  cpc::IlpProblem::Solution s;
  std::string why;
  EXPECT_FALSE(p.solve(10.0, s, why));
  EXPECT_EQ(why, "the program has no feasible solution");
}

} // namespace
