//===- IlpSolver.cpp - a small 0-1 linear program, solved by COIN-OR CBC --===//
#include "passes/IlpSolver.h"

#include <coin/Cbc_C_Interface.h>

#include <memory>

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
  std::unique_ptr<Cbc_Model, void (*)(Cbc_Model *)> model(Cbc_newModel(), Cbc_deleteModel);
  Cbc_setLogLevel(model.get(), 0);
  for (size_t i = 0; i < costs_.size(); ++i)
    Cbc_addCol(model.get(), "", 0.0, 1.0, costs_[i], binary_[i] ? 1 : 0, 0, nullptr, nullptr);
  for (const Row &row : rows_) {
    std::vector<int> cols;
    std::vector<double> coefs;
    for (auto [c, v] : row.terms) {
      cols.push_back(c);
      coefs.push_back(v);
    }
    Cbc_addRow(model.get(), "", (int)cols.size(), cols.data(), coefs.data(), row.sense, row.rhs);
  }
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
