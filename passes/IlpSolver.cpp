//===- IlpSolver.cpp - a small 0-1 linear program, solved by COIN-OR CBC --===//
#include "passes/IlpSolver.h"

#include <coin/Cbc_C_Interface.h>

#include <limits>
#include <map>
#include <memory>
#include <mutex>
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
  // One solve at a time in the process: cpc plan compiles layouts on several threads, and CBC's
  // reentrancy is not documented.
  static std::mutex solverMutex;
  std::lock_guard<std::mutex> lock(solverMutex);
  std::unique_ptr<Cbc_Model, void (*)(Cbc_Model *)> model(Cbc_newModel(), Cbc_deleteModel);
  Cbc_setLogLevel(model.get(), 0);
  // The whole matrix at once, by columns: adding rows one by one regrows CBC's matrix each time,
  // quadratic in the program's size (most of cpc plan's time on a GPT of 24 layers).
  int columns = (int)costs_.size(), rows = (int)rows_.size();
  std::vector<std::map<int, double>> byColumn(columns); // row -> coefficient (repeated terms add)
  std::vector<double> rowLower(rows), rowUpper(rows);
  for (int r = 0; r < rows; ++r) {
    for (auto [c, v] : rows_[r].terms)
      byColumn[c][r] += v;
    rowUpper[r] = rows_[r].rhs;
    rowLower[r] = rows_[r].sense == 'E' ? rows_[r].rhs : -std::numeric_limits<double>::max();
  }
  std::vector<CoinBigIndex> start{0};
  std::vector<int> index;
  std::vector<double> value;
  for (const auto &column : byColumn) {
    for (auto [r, v] : column) {
      index.push_back(r);
      value.push_back(v);
    }
    start.push_back((CoinBigIndex)index.size());
  }
  std::vector<double> lower(columns, 0.0), upper(columns, 1.0);
  Cbc_loadProblem(model.get(), columns, rows, start.data(), index.data(), value.data(), lower.data(), upper.data(),
                  costs_.data(), rowLower.data(), rowUpper.data());
  for (int c = 0; c < columns; ++c)
    if (binary_[c])
      Cbc_setInteger(model.get(), c);
  Cbc_setMaximumSeconds(model.get(), seconds);
  // The sharding programs' relaxations are nearly integral: CBC's primal heuristics cost two
  // thirds of the solve time (GPT-small tp2: 4.8 s -> 1.7 s) and find nothing branching doesn't.
  Cbc_setParameter(model.get(), "heuristics", "off");
  Cbc_solve(model.get());
  const double *values = Cbc_getColSolution(model.get());
  if (Cbc_isProvenInfeasible(model.get()) || !values || Cbc_getObjValue(model.get()) >= 1e50) {
    why = Cbc_isProvenInfeasible(model.get()) ? "the program has no feasible solution"
                                              : "no feasible solution within the time limit";
    return false;
  }
  out.values.assign(values, values + costs_.size());
  out.objective = Cbc_getObjValue(model.get());
  out.optimal = Cbc_isProvenOptimal(model.get());
  return true;
}

} // namespace cpc
