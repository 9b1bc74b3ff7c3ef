//===- AutoSharding.h - a mesh axis's layout chosen by search -------------===//
//
// Alpa's intra-op formulation over one mesh axis (tensor parallelism's `tp`): every op offers
// its strategies, derived from its sharding rule (the axis on one of its factors, or on none),
// each with its compute time; every edge between a producer and a user is priced by the
// collectives that turn the producer's layout into the one the user's strategy wants
// (ReshardCost.h); a 0-1 program picks one strategy per op and one layout per variable so that
// the step's time is least. Tensor parallelism splits the model's weights: a trainable
// parameter of rank >= 2 that feeds a contraction is stored split, and the contractions that
// read it split one of its factors; which factor, and everything else, is the search's.
//
// The choice is written as seeds that propagation keeps: every op's result layouts
// (cpc.shardings at priority 1, the batch axes the data-parallel propagation would give
// included), a cpc.shard where an operand is resharded, and the parameters' layouts for the
// tensor-parallel pass to store. cpc-data-parallel then partitions as for any seeds.
//
#ifndef CPC_PASSES_AUTOSHARDING_H
#define CPC_PASSES_AUTOSHARDING_H

#include "passes/ReshardCost.h"
#include "passes/Sharding.h"

#include "llvm/ADT/StringMap.h"

namespace cpc {

/// On a searched function: what the search chose among and predicts (a dictionary: axis,
/// nodes, tied, strategies, program_variables, optimal, collectives, bytes per run, seconds,
/// and the reshards as lines; no timings, so that the IR is the same on every run).
inline constexpr llvm::StringLiteral kSearchAttr = "cpc.sharding_search";

struct ShardingSearchOptions {
  std::string axis = "tp";
  LinkCost link;                                  // what a resharding's collective costs
  CostProfile profile = CostProfile::builtIn();   // what an op's compute costs
  double solverSeconds = 60;
  /// Bytes per rank the variables (parameters and optimizer states) may hold; 0: no budget,
  /// and weights are split by rule instead. With a budget a weight stays whole where the rest
  /// fits and that is cheaper.
  int64_t variableBudget = 0;
};

struct ShardingSearchResult {
  /// The layout over the axis chosen for each variable the function reads (by symbol).
  llvm::StringMap<Layout> variables;
  int64_t nodes = 0, strategies = 0, programVariables = 0;
  int64_t tiedNodes = 0; // nodes that share another's choice (repeated blocks)
  double predictedSeconds = 0; // compute plus resharding of the chosen strategies
  double predictedBytes = 0;   // what each rank sends for the resharding, per run of the function
  int64_t predictedCollectives = 0;
  std::vector<std::string> reshardLines; // "user op: have -> want type, bytes" per use that communicates
  bool optimal = false;
  double variableBytes = 0; // what the chosen layouts' variables hold per rank
};

/// Chooses the layout of `func` over `options.axis` of `mesh` and writes it as seeds (see the
/// file comment). `decided` holds variables whose layout is already fixed (an earlier function
/// chose it, or a --shard override). Fails with a diagnostic on `func`.
mlir::FailureOr<ShardingSearchResult> searchShardingLayout(mlir::func::FuncOp func, const Mesh &mesh,
                                                           const ShardingSearchOptions &options,
                                                           const llvm::StringMap<Layout> &decided);

} // namespace cpc

#endif
