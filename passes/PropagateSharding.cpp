//===- PropagateSharding.cpp - sharding propagation over factor rules -----===//
//
// From a few seeds (annotated arguments, results, cpc.shard ops), every value gets a layout:
// dims that share a factor of an op's rule (ShardingRules.cpp) are split alike, forward and
// backward, until nothing changes. A result is then marked as a partial sum where its op
// contracts a split factor (matmul K, a sum over the split batch) or is linear in a partial
// operand. Types stay global; cpc-partition turns the layouts into the per-rank program.
//
#include "passes/Passes.h"
#include "passes/Sharding.h"

namespace cpc {
#define GEN_PASS_DEF_CPCPROPAGATESHARDING
#include "passes/Passes.h.inc"
} // namespace cpc

using namespace mlir;
using namespace cpc;

namespace {

RankedTensorType tensorType(Value v) { return llvm::cast<RankedTensorType>(v.getType()); }

class Propagator {
public:
  Propagator(func::FuncOp func, const Mesh &mesh) : func_(func), mesh_(mesh) {}

  LogicalResult run() {
    if (failed(readSeeds()))
      return failure();
    propagateSplits();
    inferPartialSums();
    record();
    return success();
  }

private:
  LogicalResult seed(Value v, ShardingAttr attr, Operation *where) {
    FailureOr<Layout> l = readLayout(attr, v, mesh_, where);
    if (failed(l))
      return failure();
    layouts_[v] = *l;
    seeds_.insert(v);
    return success();
  }

  LogicalResult readSeeds() {
    for (BlockArgument arg : func_.getArguments())
      if (auto attr = func_.getArgAttrOfType<ShardingAttr>(arg.getArgNumber(), kArgShardingAttr))
        if (failed(seed(arg, attr, func_)))
          return failure();
    for (Operation &op : func_.getBody().front()) {
      if (auto shard = llvm::dyn_cast<ShardOp>(op))
        if (failed(seed(shard.getResult(), shard.getSharding(), &op)))
          return failure();
      if (auto list = op.getAttrOfType<ArrayAttr>(kResultShardingsAttr))
        for (auto [r, attr] : llvm::zip(op.getResults(), list))
          if (failed(seed(r, llvm::cast<ShardingAttr>(attr), &op)))
            return failure();
    }
    return success();
  }

  /// Values propagation may not split: inputs without a seed, parameters and states.
  static bool fixed(Value v) {
    if (llvm::isa<BlockArgument>(v))
      return true;
    return llvm::isa<ParameterOp, StateOp>(v.getDefiningOp());
  }

  /// Assigns layouts from the factors of each op's rule, both directions, to a fixpoint. A value
  /// keeps the first layout it gets (seeds keep theirs).
  void propagateSplits() {
    SmallVector<Operation *> ops;
    for (Operation &op : func_.getBody().front())
      ops.push_back(&op);
    for (int iteration = 0; iteration < 8; ++iteration) {
      bool changed = false;
      auto visit = [&](Operation *op) {
        std::optional<ShardingRule> rule = getShardingRule(op);
        if (!rule)
          return;
        SmallVector<MeshAxes> factorAxes(rule->numFactors());
        for (auto [v, factors] : llvm::zip(op->getOperands(), rule->operands))
          if (auto it = layouts_.find(v); it != layouts_.end())
            collectFactorAxes(factorAxes, it->second, factors);
        for (auto [v, factors] : llvm::zip(op->getResults(), rule->results))
          if (auto it = layouts_.find(v); it != layouts_.end())
            collectFactorAxes(factorAxes, it->second, factors);
        auto assign = [&](Value v, ArrayRef<int64_t> factors) {
          if (layouts_.count(v) || fixed(v))
            return;
          auto t = tensorType(v);
          Layout l = Layout::whole(t.getRank());
          for (auto [d, f] : llvm::enumerate(factors))
            if (f >= 0 && !factorAxes[f].empty() && t.getDimSize(d) % mesh_.parts(factorAxes[f]) == 0)
              l.dims[d] = factorAxes[f];
          if (l.isSplit()) {
            layouts_[v] = l;
            changed = true;
          }
        };
        for (auto [v, factors] : llvm::zip(op->getResults(), rule->results))
          assign(v, factors);
        for (auto [v, factors] : llvm::zip(op->getOperands(), rule->operands))
          assign(v, factors);
      };
      for (Operation *op : ops)
        visit(op);
      for (Operation *op : llvm::reverse(ops))
        visit(op);
      if (!changed)
        break;
    }
  }

  Layout layoutOf(Value v) {
    auto it = layouts_.find(v);
    return it != layouts_.end() ? it->second : Layout::whole(tensorType(v).getRank());
  }

  /// Marks partial sums, in program order: the same rule partitioning applies (reduced split
  /// factors, partial operands an op is linear in). Where the all-reduces go is partitioning's
  /// choice; partial sums that no op can take stay marked here and are reduced there.
  void inferPartialSums() {
    for (Operation &op : func_.getBody().front()) {
      if (op.getNumResults() == 0 || op.getNumOperands() == 0)
        continue;
      std::optional<ShardingRule> rule = getShardingRule(&op);
      if (!rule)
        continue;
      SmallVector<bool> partialIn;
      for (Value v : op.getOperands())
        partialIn.push_back(!layoutOf(v).partial.empty());
      SmallVector<bool> kept = partialOperandsKept(&op, true, partialIn);
      MeshAxes passed;
      for (auto [i, v] : llvm::enumerate(op.getOperands()))
        if (kept[i])
          passed = layoutOf(v).partial;
      SmallVector<MeshAxes> factorAxes(rule->numFactors());
      for (auto [v, factors] : llvm::zip(op.getResults(), rule->results))
        collectFactorAxes(factorAxes, layoutOf(v), factors);
      for (auto [v, factors] : llvm::zip(op.getOperands(), rule->operands))
        collectFactorAxes(factorAxes, layoutOf(v), factors);
      for (auto [i, r] : llvm::enumerate(op.getResults())) {
        if (seeds_.count(r))
          continue;
        Layout l = resultLayout(*rule, i, tensorType(r), factorAxes, passed, mesh_);
        Layout &have = layouts_.try_emplace(r, Layout::whole(tensorType(r).getRank())).first->second;
        // A value split over an axis cannot also be a partial sum over it (a partial operand
        // that meets a split one): partitioning refuses to slice the partial sum.
        bool clash = llvm::any_of(have.dims, [&](const MeshAxes &axes) {
          return llvm::any_of(axes, [&](const std::string &a) { return llvm::is_contained(l.partial, a); });
        });
        if (!clash)
          have.partial = l.partial;
      }
    }
  }

  /// Writes the layouts: results of ops that have a split or partial one get `cpc.shardings`.
  void record() {
    for (Operation &op : func_.getBody().front()) {
      if (llvm::isa<ShardOp>(op) || llvm::none_of(op.getResults(), [&](Value r) { return layoutOf(r).isSharded(); }))
        continue;
      SmallVector<Attribute> list;
      for (Value r : op.getResults())
        list.push_back(layoutOf(r).toAttr(mesh_.ref()));
      op.setAttr(kResultShardingsAttr, ArrayAttr::get(op.getContext(), list));
    }
  }

  func::FuncOp func_;
  Mesh mesh_;
  llvm::DenseMap<Value, Layout> layouts_;
  llvm::DenseSet<Value> seeds_;
};

struct CpcPropagateShardingPass : cpc::impl::CpcPropagateShardingBase<CpcPropagateShardingPass> {
  using CpcPropagateShardingBase::CpcPropagateShardingBase;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<func::FuncOp> targets;
    if (funcs.empty()) {
      llvm::append_range(targets, module.getOps<func::FuncOp>());
    } else {
      for (const std::string &name : funcs) {
        auto func = module.lookupSymbol<func::FuncOp>(name);
        if (!func) {
          module.emitError("no function @") << name;
          return signalPassFailure();
        }
        targets.push_back(func);
      }
    }
    for (func::FuncOp func : targets) {
      if (func.isExternal())
        continue;
      FailureOr<MeshOp> mesh = findAnnotatedMesh(func);
      if (failed(mesh))
        return signalPassFailure();
      if (*mesh && failed(propagateShardings(func, Mesh(*mesh))))
        return signalPassFailure();
    }
  }
};

} // namespace

LogicalResult cpc::propagateShardings(func::FuncOp func, const Mesh &mesh) { return Propagator(func, mesh).run(); }
