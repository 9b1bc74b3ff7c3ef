//===- ReshardCost.cpp - what turning one layout into another costs -------===//
#include "passes/ReshardCost.h"

using namespace mlir;

namespace cpc {

std::optional<int64_t> reduceScatterDim(const Layout &have, const Layout &want, const Mesh &mesh) {
  if (have.partial.empty() || have.reduction != ReductionKind::Sum)
    return std::nullopt;
  std::optional<int64_t> dim;
  for (size_t d = 0; d < want.dims.size(); ++d) {
    if (want.dims[d] == have.dims[d])
      continue;
    if (dim || !have.dims[d].empty() || want.dims[d] != have.partial || !mesh.inOrder(have.partial))
      return std::nullopt;
    dim = d;
  }
  return dim;
}

namespace {

/// Prices the steps one at a time on the layout they leave behind.
class ReshardPricer {
public:
  ReshardPricer(const Layout &have, ArrayRef<int64_t> shape, int64_t elementBytes, const Mesh &mesh)
      : now_(have), shape_(shape), elementBytes_(elementBytes), mesh_(mesh) {}

  CommCost price(const Layout &want) {
    bool keepPartial = !want.partial.empty();
    if (keepPartial && (want.partial != now_.partial || want.reduction != now_.reduction)) {
      cost_.infeasible = true; // each rank's copy of a whole value is not a partial sum of it
      return cost_;
    }
    if (!keepPartial && !now_.partial.empty())
      if (std::optional<int64_t> dim = reduceScatterDim(now_, want, mesh_)) {
        // A reduce-scatter: every rank keeps the sum of its block.
        int64_t n = mesh_.parts(now_.partial);
        add((double)(n - 1) * localBytes() / (double)n);
        now_.dims[*dim] = now_.partial;
        now_.clearPartial();
      }
    if (!keepPartial)
      reduce(); // as partitioning does, before anything moves
    moveSplits(want);
    gatherDims(want);
    return cost_; // what remains is slicing, which is free
  }

private:
  double localBytes() const {
    double bytes = (double)elementBytes_;
    for (size_t d = 0; d < shape_.size(); ++d)
      bytes *= (double)(shape_[d] / mesh_.parts(now_.dims[d]));
    return bytes;
  }

  void add(double bytes) {
    cost_.bytes += bytes;
    cost_.collectives += 1;
  }

  void reduce() {
    if (now_.partial.empty())
      return;
    int64_t n = mesh_.parts(now_.partial);
    add(2.0 * (double)(n - 1) * localBytes() / (double)n);
    now_.clearPartial();
  }

  /// A split that moves to a dim that is whole goes by one all-to-all.
  void moveSplits(const Layout &want) {
    for (size_t from = 0; from < want.dims.size(); ++from) {
      if (now_.dims[from].empty() || !want.dims[from].empty())
        continue;
      for (size_t to = 0; to < want.dims.size(); ++to) {
        int64_t n = mesh_.parts(now_.dims[from]);
        if (to == from || !now_.dims[to].empty() || want.dims[to] != now_.dims[from] ||
            !mesh_.inOrder(now_.dims[from]) || shape_[to] % n)
          continue;
        add((double)(n - 1) * localBytes() / (double)n);
        now_.dims[to] = now_.dims[from];
        now_.dims[from].clear();
        break;
      }
    }
  }

  /// Dims split otherwise than wanted are gathered: the minor axes only where `want` keeps the
  /// major ones, else all of them.
  void gatherDims(const Layout &want) {
    for (size_t d = 0; d < want.dims.size(); ++d) {
      if (now_.dims[d].empty() || want.dims[d] == now_.dims[d])
        continue;
      bool keepsMajor = !want.dims[d].empty() && want.dims[d].size() < now_.dims[d].size() &&
                        std::equal(want.dims[d].begin(), want.dims[d].end(), now_.dims[d].begin());
      size_t keep = keepsMajor ? want.dims[d].size() : 0;
      if (!keepsMajor && mesh_.inOrder(now_.dims[d])) { // one all-gather over all of them
        add((double)(mesh_.parts(now_.dims[d]) - 1) * localBytes());
        now_.dims[d].clear();
        continue;
      }
      while (now_.dims[d].size() > keep) { // minor first, one axis at a time
        int64_t n = mesh_.parts({now_.dims[d].back()});
        add((double)(n - 1) * localBytes());
        now_.dims[d].pop_back();
      }
    }
  }

  Layout now_;
  ArrayRef<int64_t> shape_;
  int64_t elementBytes_;
  const Mesh &mesh_;
  CommCost cost_;
};

} // namespace

CommCost reshardCost(const Layout &have, const Layout &want, ArrayRef<int64_t> shape, int64_t elementBytes,
                     const Mesh &mesh) {
  return ReshardPricer(have, shape, elementBytes, mesh).price(want);
}

} // namespace cpc
