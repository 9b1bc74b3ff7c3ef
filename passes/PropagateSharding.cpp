//===- PropagateSharding.cpp - sharding propagation over factor rules -----===//
//
// From a few seeds (annotated arguments, results, cpc.shard ops), every value gets a layout
// over any number of mesh axes: dims that share a factor of an op's rule (ShardingRules.cpp)
// are split alike, forward and backward, until nothing changes; a dim of several factors gives
// its axes to them major first. Priorities: annotations propagate in tiers of their `priority`
// (0 first; user annotations are 0), and a value keeps what an earlier tier gave it; within a
// tier, program order decides (forward, then backward, the first op to split a dim wins). A
// result is then marked partial where its op reduces a split factor (matmul K: sum; a max over
// a split dim: max) or passes a partial operand on. Types stay global; cpc-partition turns the
// layouts into the per-rank program.
//
#include "passes/Passes.h"
#include "passes/Sharding.h"
#include "passes/MatMulStrategies.h"

#include <set>

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
  Propagator(func::FuncOp func, const Mesh &mesh)
      : func_(func), mesh_(mesh), strategyMesh_(hasSummaAxes(mesh) || has3DAxes(mesh)) {}

  LogicalResult run() {
    if (failed(readSeeds()))
      return failure();
    // Annotations of priority 0 propagate to a fixpoint first, then those of 1, and so on: a
    // value keeps the dims an earlier tier split, a later one may only split dims left whole.
    std::set<int64_t> tiers;
    for (const Seed &s : seedList_)
      tiers.insert(s.priority);
    for (int64_t tier : tiers) {
      for (const Seed &s : seedList_)
        if (s.priority == tier) {
          layouts_[s.value] = s.layout;
          seeds_.insert(s.value);
          if (s.layout.isSplit())
            splitSeeds_.insert(s.value);
        }
      propagateSplits();
    }
    inferPartialSums();
    record();
    return success();
  }

private:
  struct Seed {
    Value value;
    Layout layout;
    int64_t priority;
  };

  LogicalResult seed(Value v, ShardingAttr attr, Operation *where) {
    FailureOr<Layout> l = readLayout(attr, v, mesh_, where);
    if (failed(l))
      return failure();
    seedList_.push_back({v, *l, attr.getPriority()});
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

  /// Values propagation may not split: seeds (except a state's annotation that only says it is
  /// partial), inputs without a seed and parameters without one. A state (optimizer moments,
  /// accumulators) follows what it is combined with, so that the moments of a split parameter
  /// are split alike and each rank stores its block.
  bool fixed(Value v) const {
    bool state = !llvm::isa<BlockArgument>(v) && llvm::isa<StateOp>(v.getDefiningOp());
    if (seeds_.count(v)) // (a state seeded only partial takes splits until its dims are all set)
      return !state || splitSeeds_.count(v);
    if (llvm::isa<BlockArgument>(v))
      return true;
    return !state && llvm::isa<ParameterOp>(v.getDefiningOp());
  }

  /// The factor axes of `op` that its values' layouts imply, made legal.
  FactorAxes factorAxesOf(Operation *op, const ShardingRule &rule, bool resultsFirst) {
    return cpc::factorAxesOf(
        op, rule, mesh_, resultsFirst, [&](Value v) { return layoutOf(v); },
        [&](OpOperand &operand) { return layoutOf(operand.get()); });
  }

  /// The axes over which the op defining `v` makes it partial (split factors that its operands
  /// have and `v` lacks): `v` cannot also be split over them.
  MeshAxes reducedAxes(Value v) {
    auto result = llvm::dyn_cast<OpResult>(v);
    if (!result)
      return {};
    auto it = rules_.find(result.getOwner());
    if (it == rules_.end())
      return {};
    // A strategy's matmul sums over the axes its strategy says (not the factor rule's K).
    if (std::optional<std::optional<Layout>> strategy = strategyLayout(result.getOwner()))
      return *strategy ? (*strategy)->partial : MeshAxes{};
    FactorAxes factorAxes = factorAxesOf(result.getOwner(), it->second, /*resultsFirst=*/false);
    return resultLayout(it->second, result.getResultNumber(), factorAxes, nullptr).partial;
  }

  /// Splits the whole dims of `v` that the factor axes split, unless the axes are in use by
  /// another dim of `v` or `v` is partial over them (a row-parallel matmul's output stays whole
  /// and partial even where its user wants it split: the partial sum is reduce-scattered there).
  bool refine(Value v, ArrayRef<ShardingRule::DimFactors> dims, const FactorAxes &factorAxes) {
    if (fixed(v))
      return false;
    auto it = layouts_.find(v);
    Layout l = it != layouts_.end() ? it->second : Layout::whole(tensorType(v).getRank());
    bool changed = false;
    std::optional<MeshAxes> reduced;
    for (auto [d, factors] : llvm::enumerate(dims)) {
      MeshAxes axes = dimAxes(factors, factorAxes);
      if (!l.dims[d].empty() || axes.empty() || llvm::any_of(axes, [&](const std::string &a) { return l.uses(a); }))
        continue;
      if (!reduced)
        reduced = reducedAxes(v);
      if (llvm::any_of(axes, [&](const std::string &a) { return llvm::is_contained(*reduced, a); }))
        continue;
      l.dims[d] = axes;
      changed = true;
    }
    if (changed)
      layouts_[v] = l;
    return changed;
  }

  /// Splits the whole dims of `v` as `want` does where its axes are free (a result whose layout
  /// a partitioning strategy decides).
  bool refineTo(Value v, const Layout &want) {
    if (fixed(v))
      return false;
    Layout l = layoutOf(v);
    bool changed = false;
    for (size_t d = 0; d < l.dims.size(); ++d)
      if (l.dims[d].empty() && !want.dims[d].empty() &&
          llvm::none_of(want.dims[d], [&](const std::string &a) { return l.uses(a); })) {
        l.dims[d] = want.dims[d];
        changed = true;
      }
    if (changed)
      layouts_[v] = l;
    return changed;
  }

  /// A matmul that a strategy partitions (its rhs split over the 2D or 3D axes): its result's
  /// layout is the strategy's once the lhs is laid out too, never the factor rule's. Null when
  /// it is not one.
  std::optional<std::optional<Layout>> strategyLayout(Operation *op) {
    auto mm = llvm::dyn_cast<MatMulOp>(op);
    if (!mm || !strategyMesh_ || !hasStrategyRhs(mm, mesh_, layoutOf(mm.getRhs())))
      return std::nullopt;
    return strategyResultLayout(mm, mesh_, layoutOf(mm.getLhs()), layoutOf(mm.getRhs()), layoutOf(mm.getResult()));
  }

  /// Assigns layouts from the factors of each op's rule, forward and backward in program order
  /// (which decides ties within a tier), until nothing changes. Splits are only ever added, so
  /// this ends.
  void propagateSplits() {
    SmallVector<std::pair<Operation *, ShardingRule>> ops;
    for (Operation &op : func_.getBody().front())
      if (std::optional<ShardingRule> rule = getShardingRule(&op)) {
        rules_.try_emplace(&op, *rule);
        ops.emplace_back(&op, std::move(*rule));
      }
    // A strategy's matmul whose result has no layout yet waits for the other ops' fixpoint: its
    // users may say how they want it (a weight gradient laid out as its weight), which picks
    // between the strategy's forms; then the waiting ones decide, and propagation goes on.
    bool decided = true;
    while (decided) {
      bool changed = true;
      while (changed) {
        changed = false;
        for (auto &[op, rule] : ops)
          changed |= visit(op, rule, /*decideUnlaid=*/false);
        for (auto &[op, rule] : llvm::reverse(ops))
          changed |= visit(op, rule, /*decideUnlaid=*/false);
      }
      decided = false;
      for (auto &[op, rule] : ops)
        if (strategyLayout(op))
          decided |= visit(op, rule, /*decideUnlaid=*/true);
    }
  }

  /// Refines the values of `op` from its rule, or its result from its strategy (a result whose
  /// layout is still whole only with `decideUnlaid`); whether anything changed.
  bool visit(Operation *op, const ShardingRule &rule, bool decideUnlaid) {
    if (std::optional<std::optional<Layout>> strategy = strategyLayout(op)) {
      Value r = op->getResult(0);
      if (!*strategy || (!decideUnlaid && !layoutOf(r).isSplit()))
        return false;
      return refineTo(r, **strategy);
    }
    bool changed = false;
    FactorAxes factorAxes = factorAxesOf(op, rule, /*resultsFirst=*/false);
    for (auto [v, dims] : llvm::zip(op->getResults(), rule.results))
      changed |= refine(v, dims, factorAxes);
    for (auto [v, dims] : llvm::zip(op->getOperands(), rule.operands))
      changed |= refine(v, dims, factorAxes);
    return changed;
  }

  Layout layoutOf(Value v) {
    auto it = layouts_.find(v);
    return it != layouts_.end() ? it->second : Layout::whole(tensorType(v).getRank());
  }

  /// Marks partial values, in program order: the same rule partitioning applies (reduced split
  /// factors, partial operands an op passes on). Where the all-reduces go is partitioning's
  /// choice; partial values that no op can take stay marked here and are reduced there.
  void inferPartialSums() {
    for (Operation &op : func_.getBody().front()) {
      if (op.getNumResults() == 0 || op.getNumOperands() == 0)
        continue;
      std::optional<ShardingRule> rule = getShardingRule(&op);
      if (!rule)
        continue;
      if (std::optional<std::optional<Layout>> strategy = strategyLayout(&op)) {
        Value r = op.getResult(0);
        if (*strategy && !seeds_.count(r)) {
          Layout &have = layouts_.try_emplace(r, Layout::whole(tensorType(r).getRank())).first->second;
          have.partial = (*strategy)->partial;
          have.reduction = ReductionKind::Sum;
        }
        continue;
      }
      SmallVector<Layout> operands;
      for (Value v : op.getOperands())
        operands.push_back(layoutOf(v));
      SmallVector<bool> kept = partialOperandsKept(&op, true, operands);
      const Layout *passed = nullptr;
      for (auto [i, l] : llvm::enumerate(operands))
        if (kept[i])
          passed = &l;
      FactorAxes factorAxes = factorAxesOf(&op, *rule, /*resultsFirst=*/true);
      for (auto [i, r] : llvm::enumerate(op.getResults())) {
        if (seeds_.count(r))
          continue;
        Layout l = resultLayout(*rule, i, factorAxes, passed);
        Layout &have = layouts_.try_emplace(r, Layout::whole(tensorType(r).getRank())).first->second;
        // A value split over an axis cannot also be partial over it (a partial operand that
        // meets a split one): partitioning refuses to slice the partial value.
        bool clash = llvm::any_of(have.dims, [&](const MeshAxes &axes) {
          return llvm::any_of(axes, [&](const std::string &a) { return llvm::is_contained(l.partial, a); });
        });
        if (!clash) {
          have.partial = l.partial;
          have.reduction = l.reduction;
        }
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
  bool strategyMesh_; // the mesh has the 2D or the 3D tensor-parallel axes
  SmallVector<Seed> seedList_;
  llvm::DenseMap<Operation *, ShardingRule> rules_;
  llvm::DenseMap<Value, Layout> layouts_;
  llvm::DenseSet<Value> seeds_;
  llvm::DenseSet<Value> splitSeeds_; // seeds whose annotation splits a dim
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
