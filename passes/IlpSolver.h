//===- IlpSolver.h - a small 0-1 linear program, solved by COIN-OR CBC ----===//
//
// The sharding search states its choice as a linear program over 0-1 variables (Alpa's
// formulation); this is the one place that talks to the solver library, so the search reads as
// the formulation and the solver could be swapped.
//
#ifndef CPC_PASSES_ILPSOLVER_H
#define CPC_PASSES_ILPSOLVER_H

#include <string>
#include <utility>
#include <vector>

namespace cpc {

class IlpProblem {
public:
  /// A variable in [0, 1] with `cost` in the objective (minimized); 0 or 1 when `binary`.
  int addVariable(double cost, bool binary);
  /// sum(coefficient * variable) == rhs.
  void addEquality(const std::vector<std::pair<int, double>> &terms, double rhs);
  /// sum(coefficient * variable) <= rhs.
  void addAtMost(const std::vector<std::pair<int, double>> &terms, double rhs);

  int numVariables() const { return (int)costs_.size(); }
  int numConstraints() const { return (int)rows_.size(); }

  struct Solution {
    std::vector<double> values;
    double objective = 0;
    bool optimal = false; // false: the best found when the time ran out
  };
  /// Solves within `seconds`; fails (with `why`) when no feasible solution was found.
  bool solve(double seconds, Solution &out, std::string &why) const;

private:
  struct Row {
    std::vector<std::pair<int, double>> terms;
    char sense;
    double rhs;
  };
  std::vector<double> costs_;
  std::vector<bool> binary_;
  std::vector<Row> rows_;
};

} // namespace cpc

#endif
