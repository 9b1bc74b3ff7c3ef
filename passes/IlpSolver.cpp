//===- IlpSolver.cpp - a small 0-1 linear program, solved by COIN-OR CBC --===//
#include "passes/IlpSolver.h"

#include <coin/CbcModel.hpp>
#include <coin/CoinPackedMatrix.hpp>
#include <coin/OsiClpSolverInterface.hpp>

#include <limits>
#include <map>
#include <memory>
#include <vector>

namespace cpc {

int IlpProblem::addVariable(double cost, bool binary) {
  costs_.push_back(cost);
  binary_.push_back(binary);
  return (int)costs_.size() - 1;
}

void IlpProblem::addEquality(const std::vector<std::pair<int, double>> &terms, double rhs) {
  rows_.push_back({terms, 'E', rhs});
}

void IlpProblem::addAtMost(const std::vector<std::pair<int, double>> &terms, double rhs) {
  rows_.push_back({terms, 'L', rhs});
}

bool IlpProblem::solve(double seconds, Solution &out, std::string &why) const {
  // The whole matrix at once, by columns: adding rows one by one regrows the matrix each time,
  // quadratic in the program's size (most of cpc plan's time on a GPT of 24 layers).
  int columns = (int)costs_.size(), rows = (int)rows_.size();
  std::vector<std::map<int, double>> byColumn(columns); // row -> coefficient (repeated terms add)
  std::vector<double> rowLower(rows), rowUpper(rows);
  for (int r = 0; r < rows; ++r) {
    for (auto [c, v] : rows_[r].terms)
      byColumn[c][r] += v;
    rowUpper[r] = rows_[r].rhs;
    rowLower[r] = rows_[r].sense == 'E' ? rows_[r].rhs : -COIN_DBL_MAX;
  }
  std::vector<CoinBigIndex> start{0};
  std::vector<int> index, length;
  std::vector<double> value;
  for (const auto &column : byColumn) {
    for (auto [r, v] : column) {
      index.push_back(r);
      value.push_back(v);
    }
    start.push_back((CoinBigIndex)index.size());
    length.push_back((int)column.size());
  }
  std::vector<double> lower(columns, 0.0), upper(columns, 1.0);
  // CbcModel on its own solver, not CBC's command-line driver (CbcMain, behind the C interface),
  // whose parameters are process globals: cpc plan solves the layouts' programs on several
  // threads at once. Its cut generators and heuristics are left out too: the sharding programs'
  // relaxations are nearly integral and branching closes the gap (GPT-small tp2: 4.8 s -> 1.7 s
  // without the heuristics alone).
  OsiClpSolverInterface solver;
  solver.messageHandler()->setLogLevel(0);
  solver.setHintParam(OsiDoReducePrint, true, OsiHintTry);
  CoinPackedMatrix matrix(true, rows, columns, (CoinBigIndex)index.size(), value.data(), index.data(), start.data(),
                          length.data());
  solver.loadProblem(matrix, lower.data(), upper.data(), costs_.data(), rowLower.data(), rowUpper.data());
  for (int c = 0; c < columns; ++c)
    if (binary_[c])
      solver.setInteger(c);
  solver.initialSolve();
  if (!solver.isProvenOptimal()) {
    why = "the program has no feasible solution";
    return false;
  }
  CbcModel model(solver);
  model.setLogLevel(0);
  model.messageHandler()->setLogLevel(0);
  model.setMaximumSeconds(seconds);
  model.branchAndBound();
  const double *values = model.bestSolution();
  if (!values) {
    why = model.isProvenInfeasible() ? "the program has no feasible solution" : "no feasible solution within the time limit";
    return false;
  }
  out.values.assign(values, values + columns);
  out.objective = model.getObjValue();
  out.optimal = model.isProvenOptimal();
  return true;
}

} // namespace cpc
