//===- ReshardCost.h - what turning one layout into another costs ---------===//
//
// The collectives cpc-partition inserts to turn a value laid out as `have` into the layout an
// op wants, priced without building them: the sharding search compares thousands of such
// choices. The steps mirror Partitioner::resharded (reduce-scatter or all-reduce of a partial
// value the op does not pass on, all-to-all of a split that moves, all-gather of splits the op
// does not want, free slices), and the bytes are the counting communicator's ring formulas
// (runtime/Communicator.h, traffic::), so a prediction can be checked against a run's counts.
//
#ifndef CPC_PASSES_RESHARDCOST_H
#define CPC_PASSES_RESHARDCOST_H

#include "passes/Sharding.h"
#include "runtime/CostProfile.h"

namespace cpc {

/// Bytes one rank sends and collectives it joins; `infeasible` when no collective sequence
/// gives the layout (a whole value wanted as a partial one).
struct CommCost {
  double bytes = 0;
  int64_t collectives = 0;
  bool infeasible = false;

  double seconds(const LinkCost &link) const { // a link of the cost profile (runtime/CostProfile.h)
    return collectives * link.latencySeconds + bytes / link.bytesPerSecond;
  }
  CommCost &operator+=(const CommCost &other) {
    bytes += other.bytes;
    collectives += other.collectives;
    infeasible |= other.infeasible;
    return *this;
  }
};

/// The cost of making a value of global `shape` (elements of `elementBytes`) laid out as `have`
/// into `want` on `mesh`. A partial `have` is reduced unless `want` is partial over the same axes.
CommCost reshardCost(const Layout &have, const Layout &want, llvm::ArrayRef<int64_t> shape, int64_t elementBytes,
                     const Mesh &mesh);

/// The dim along which a reduce-scatter turns partial sums `have` into `want` (the one dim
/// `want` splits over exactly the partial axes where `have` is whole, every other dim alike).
std::optional<int64_t> reduceScatterDim(const Layout &have, const Layout &want, const Mesh &mesh);

} // namespace cpc

#endif
