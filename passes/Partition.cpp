//===- Partition.cpp - the per-rank program of a sharded function ---------===//
//
// Reads the layouts that cpc-propagate-sharding recorded and rewrites the function into the
// program every rank runs: local types, this rank's block of whole values that meet split
// uses, all-gathers of split values that an op needs whole, and all-reduces only where a
// partial sum meets an op that is not linear in it, a result or an assign.
//
#include "dialects/cpc/Roles.h"
#include "passes/Passes.h"
#include "passes/Sharding.h"

#include "mlir/IR/Builders.h"

namespace cpc {
#define GEN_PASS_DEF_CPCPARTITION
#include "passes/Passes.h.inc"
} // namespace cpc

using namespace mlir;
using namespace cpc;

namespace {

RankedTensorType tensorType(Value v) { return llvm::cast<RankedTensorType>(v.getType()); }

class Partitioner {
public:
  Partitioner(func::FuncOp func, const Mesh &mesh)
      : func_(func), mesh_(mesh), b_(func.getContext()),
        accumulators_(stateNamesWithRole(func, StateRole::GradAccumulator)) {}

  LogicalResult run() {
    if (failed(readLayouts()))
      return failure();
    Block &block = func_.getBody().front();
    // Rules read shapes: take them all while every type is still global.
    for (Operation &op : block) {
      rules_[&op] = getShardingRule(&op);
      if (rules_[&op])
        factorSizes_[&op] = factorDimSizes(*rules_[&op], &op);
    }
    // Block arguments become local.
    for (BlockArgument arg : block.getArguments()) {
      auto it = layouts_.find(arg);
      Layout l = it != layouts_.end() ? it->second : Layout::whole(tensorType(arg).getRank());
      current_[arg] = l;
      arg.setType(localType(tensorType(arg), l));
    }
    SmallVector<Operation *> ops;
    for (Operation &op : block)
      ops.push_back(&op);
    for (Operation *op : ops)
      if (failed(partitionOp(op)))
        return failure();
    func_.setFunctionType(FunctionType::get(func_.getContext(), block.getArgumentTypes(),
                                            block.getTerminator()->getOperandTypes()));
    return success();
  }

private:
  /// The propagated layouts. Only argument seeds may say "partial sum"; whether a result is one
  /// is decided here again, since all-reduces placed for some users change it for others.
  LogicalResult readLayouts() {
    for (BlockArgument arg : func_.getArguments())
      if (auto attr = func_.getArgAttrOfType<ShardingAttr>(arg.getArgNumber(), kArgShardingAttr)) {
        FailureOr<Layout> l = readLayout(attr, arg, mesh_, func_);
        if (failed(l))
          return failure();
        layouts_[arg] = *l;
      }
    for (Operation &op : func_.getBody().front()) {
      auto list = op.getAttrOfType<ArrayAttr>(kResultShardingsAttr);
      if (!list)
        continue;
      for (auto [r, attr] : llvm::zip(op.getResults(), list)) {
        FailureOr<Layout> l = readLayout(llvm::cast<ShardingAttr>(attr), r, mesh_, &op);
        if (failed(l))
          return failure();
        l->partial.clear();
        layouts_[r] = *l;
      }
    }
    return success();
  }

  Layout layoutOf(Value v) {
    auto it = layouts_.find(v);
    return it != layouts_.end() ? it->second : Layout::whole(tensorType(v).getRank());
  }

  Layout currentOf(Value v) {
    auto it = current_.find(v);
    return it != current_.end() ? it->second : Layout::whole(tensorType(v).getRank());
  }

  RankedTensorType localType(RankedTensorType global, const Layout &l) {
    SmallVector<int64_t> shape(global.getShape());
    for (size_t d = 0; d < shape.size(); ++d)
      shape[d] /= mesh_.parts(l.dims[d]);
    return RankedTensorType::get(shape, global.getElementType());
  }

  /// The all-reduced (whole) form of a partial value, built once and reused.
  Value reduced(Value v, Operation *before) {
    auto it = allReduced_.find(v);
    if (it != allReduced_.end())
      return it->second;
    b_.setInsertionPoint(before);
    MeshAxes axes = currentOf(v).partial;
    Value r = b_.create<AllReduceOp>(before->getLoc(), ValueRange{v}, mesh_.ref(),
                                     b_.getStrArrayAttr(SmallVector<StringRef>(axes.begin(), axes.end())))
                  .getResult(0);
    Layout l = currentOf(v);
    l.partial.clear();
    current_[r] = l;
    allReduced_[v] = r;
    return r;
  }

  /// `v` made whole along `dim` by gathering every rank's block (the resharding rule), built
  /// once and reused.
  Value gathered(Value v, int64_t dim, Operation *before) {
    auto key = std::make_pair(v, dim);
    auto it = allGathered_.find(key);
    if (it != allGathered_.end())
      return it->second;
    Layout l = currentOf(v);
    MeshAxes axes = l.dims[dim];
    auto type = tensorType(v);
    SmallVector<int64_t> shape(type.getShape());
    shape[dim] *= mesh_.parts(axes);
    b_.setInsertionPoint(before);
    Value g = b_.create<AllGatherOp>(before->getLoc(), RankedTensorType::get(shape, type.getElementType()), v,
                                     mesh_.ref(), b_.getStrArrayAttr(SmallVector<StringRef>(axes.begin(), axes.end())),
                                     dim ? b_.getI64IntegerAttr(dim) : IntegerAttr());
    l.dims[dim].clear();
    current_[g] = l;
    allGathered_[key] = g;
    return g;
  }

  /// This rank's block of `v` along the dims that `want` splits and `v` has whole.
  Value sliced(Value v, const Layout &want, Operation *before) {
    Layout have = currentOf(v), slice = Layout::whole(want.dims.size());
    for (size_t d = 0; d < want.dims.size(); ++d)
      if (have.dims[d].empty())
        slice.dims[d] = want.dims[d];
    b_.setInsertionPoint(before);
    Value s = b_.create<ShardSliceOp>(before->getLoc(), localType(tensorType(v), slice), v, slice.toAttr(mesh_.ref()));
    current_[s] = want;
    return s;
  }

  /// `v` laid out as `want` (dims only) for `op`, operand `index`: gathers the dims the op needs
  /// whole, slices those it needs split. Moving a value from one split to another is refused.
  FailureOr<Value> resharded(Value v, const Layout &want, Operation *op, unsigned index) {
    Layout have = currentOf(v);
    for (size_t d = 0; d < want.dims.size(); ++d) {
      if (have.dims[d].empty() || want.dims[d] == have.dims[d])
        continue;
      if (!want.dims[d].empty())
        return op->emitError("operand ") << index << " is split along dim " << d
                                         << " where the op needs another split (resharding a split value to a "
                                            "different split is not supported yet): "
                                         << have.describe() << " vs " << want.describe();
      v = gathered(v, d, op);
    }
    if (currentOf(v).dims != want.dims) {
      if (!have.partial.empty())
        return op->emitError("cannot slice a partial sum (operand ") << index << ", " << have.describe() << ")";
      v = sliced(v, want, op);
    }
    return v;
  }

  LogicalResult partitionOp(Operation *op) {
    // Propagation's layouts of the results are replaced by the partitioned ones.
    op->removeAttr(kResultShardingsAttr);
    // Results and assigns take whole values.
    if (llvm::isa<func::ReturnOp, AssignOp>(op)) {
      // Gradient accumulators hold partial sums: each microbatch adds its local gradients and the
      // sum is reduced once per step, where the update reads it.
      auto assign = llvm::dyn_cast<AssignOp>(op);
      if (assign && isAccumulator(assign.getName()) && !currentOf(assign.getValue()).isSplit())
        return success();
      for (OpOperand &use : op->getOpOperands()) {
        Layout l = currentOf(use.get());
        if (!l.partial.empty())
          use.set(reduced(use.get(), op));
        if (currentOf(use.get()).isSplit() && llvm::isa<AssignOp>(op))
          return op->emitError("assigning a split value to a variable is not supported yet");
      }
      return success();
    }
    if (auto shard = llvm::dyn_cast<ShardOp>(op))
      return partitionShard(shard);
    if (op->getNumResults() == 0)
      return success();
    // Reads of gradient accumulators are partial sums (see the assign case above).
    if (auto state = llvm::dyn_cast<StateOp>(op);
        state && state.getRole() == StateRole::GradAccumulator && mesh_.hasAxis("dp")) {
      Layout l = Layout::whole(tensorType(state).getRank());
      l.partial = {"dp"};
      current_[state] = l;
      return success();
    }
    // Values with no operands: constants and random tensors stay whole here; users slice them.
    if (op->getNumOperands() == 0) {
      for (Value r : op->getResults())
        current_[r] = Layout::whole(tensorType(r).getRank());
      return success();
    }

    std::optional<ShardingRule> rule = rules_.lookup(op);
    // A partial sum that was already all-reduced for another user is used whole: it costs nothing
    // more, while passing the partial on would all-reduce the same data again later.
    for (OpOperand &use : op->getOpOperands()) {
      auto it = allReduced_.find(use.get());
      if (it != allReduced_.end())
        use.set(it->second);
    }
    // Operands: partial sums the op is not linear in are reduced first.
    SmallVector<bool> partialIn;
    for (OpOperand &use : op->getOpOperands())
      partialIn.push_back(!currentOf(use.get()).partial.empty());
    SmallVector<bool> kept = partialOperandsKept(op, rule.has_value(), partialIn);
    for (auto [i, use] : llvm::enumerate(op->getOpOperands()))
      if (partialIn[i] && !kept[i])
        use.set(reduced(use.get(), op));

    // An op without a rule computes on whole values: gather the split ones.
    if (!rule) {
      for (auto [i, use] : llvm::enumerate(op->getOpOperands())) {
        FailureOr<Value> v = resharded(use.get(), Layout::whole(tensorType(use.get()).getRank()), op, i);
        if (failed(v))
          return failure();
        use.set(*v);
      }
      for (Value r : op->getResults())
        current_[r] = Layout::whole(tensorType(r).getRank());
      return success();
    }

    // The axes of each factor: from the propagated layouts of results, then operands.
    SmallVector<MeshAxes> factorAxes(rule->numFactors());
    for (auto [v, factors] : llvm::zip(op->getResults(), rule->results))
      collectFactorAxes(factorAxes, layoutOf(v), factors);
    for (auto [v, factors] : llvm::zip(op->getOperands(), rule->operands))
      collectFactorAxes(factorAxes, currentOf(v), factors);
    dropIndivisibleFactors(factorAxes, factorSizes_[op], mesh_);

    // Operands must be laid out as the factors say.
    for (auto [i, use] : llvm::enumerate(op->getOpOperands())) {
      Layout want = currentOf(use.get());
      for (auto [d, f] : llvm::enumerate(rule->operands[i]))
        want.dims[d] = f >= 0 ? factorAxes[f] : MeshAxes{};
      FailureOr<Value> v = resharded(use.get(), want, op, i);
      if (failed(v))
        return failure();
      use.set(*v);
    }

    // Results: local types and partial sums.
    MeshAxes passedPartial;
    for (auto [i, use] : llvm::enumerate(op->getOpOperands()))
      if (kept[i])
        passedPartial = currentOf(use.get()).partial;
    SmallVector<Attribute> recorded;
    bool anySharded = false;
    for (auto [i, r] : llvm::enumerate(op->getResults())) {
      Layout l = resultLayout(*rule, i, tensorType(r), factorAxes, passedPartial, mesh_);
      if (failed(rewriteAttributes(op, l)))
        return failure();
      r.setType(localType(tensorType(r), l));
      current_[r] = l;
      recorded.push_back(l.toAttr(mesh_.ref()));
      anySharded |= l.isSharded();
    }
    // The layout of the results, for --dump-sharding and the plan's metadata.
    if (anySharded)
      op->setAttr(kResultShardingsAttr, b_.getArrayAttr(recorded));
    if (failed(fixReductionMeans(op)))
      return failure();
    // A partial sum that some user will need whole is reduced right where it is produced: the
    // gradient all-reduces then go out in the order backward produces them, not all at the end.
    for (Value r : op->getResults())
      reduceEagerly(r);
    return success();
  }

  /// cpc.shard: its input laid out as the annotation says (reduced, gathered or sliced); the op
  /// itself has no place in the per-rank program.
  LogicalResult partitionShard(ShardOp shard) {
    Value v = shard.getInput();
    FailureOr<Layout> want = readLayout(shard.getSharding(), shard.getResult(), mesh_, shard);
    if (failed(want))
      return failure();
    if (!currentOf(v).partial.empty() && want->partial.empty())
      v = reduced(v, shard);
    if (currentOf(v).partial != want->partial)
      return shard.emitError("cannot turn ") << currentOf(v).describe() << " into " << want->describe()
                                             << ": only ops make partial sums";
    FailureOr<Value> laidOut = resharded(v, *want, shard, 0);
    if (failed(laidOut))
      return failure();
    shard.getResult().replaceAllUsesWith(*laidOut);
    shard.erase();
    return success();
  }

  void reduceEagerly(Value v) {
    if (!currentOf(v).partial.empty() && llvm::any_of(v.getUses(), [&](OpOperand &use) { return needsWhole(use); }))
      reduced(v, v.getDefiningOp()->getNextNode());
  }

  /// Whether an assign to `name` writes a gradient accumulator (a variable the function reads
  /// with that role).
  bool isAccumulator(StringRef name) const { return accumulators_.contains(name); }

  /// Whether the user of `use` certainly needs the value whole (not a partial sum).
  bool needsWhole(OpOperand &use) const {
    Operation *user = use.getOwner();
    // Gradient accumulators keep partial sums (reduced once per step where the update reads them).
    if (auto assign = llvm::dyn_cast<AssignOp>(user))
      return !isAccumulator(assign.getName());
    if (llvm::isa<func::ReturnOp>(user))
      return true;
    if (auto shard = llvm::dyn_cast<ShardOp>(user))
      return shard.getSharding().getPartialAxisNames().empty();
    if (!propagatesPartialSums(user, use.getOperandNumber()))
      return true;
    // x * x (a squared norm) is not linear in x.
    return llvm::isa<MulOp, MatMulOp>(user) && user->getOperand(0) == user->getOperand(1);
  }

  /// Shape-carrying attributes of split ops.
  LogicalResult rewriteAttributes(Operation *op, const Layout &result) {
    if (auto slice = llvm::dyn_cast<SliceOp>(op)) {
      SmallVector<int64_t> limits(slice.getLimits());
      for (size_t d = 0; d < limits.size(); ++d)
        limits[d] /= mesh_.parts(result.dims[d]);
      slice.setLimits(limits);
    }
    if (llvm::isa<ReduceMaxOp, ReduceMinOp, ReduceProdOp>(op) && !result.partial.empty())
      return op->emitError("reduces over a split dim, which needs a max/min/product all-reduce (not supported yet)");
    return success();
  }

  /// A mean over split dims is the local mean of 1/n of the elements: scale it so that the
  /// partial sums add up to the global mean.
  LogicalResult fixReductionMeans(Operation *op) {
    auto mean = llvm::dyn_cast<ReduceMeanOp>(op);
    if (!mean || currentOf(mean).partial.empty())
      return success();
    Layout in = currentOf(mean.getInput());
    int64_t split = 1;
    for (int64_t a : mean.getAxes())
      split *= mesh_.parts(in.dims[a]);
    b_.setInsertionPointAfter(mean);
    Type et = mean.getType().getElementType();
    Value scale = b_.create<ConstantOp>(mean.getLoc(), DenseElementsAttr::get(RankedTensorType::get({}, et),
                                                                             b_.getFloatAttr(et, 1.0 / split)));
    auto scaled = b_.create<MulOp>(mean.getLoc(), mean.getResult(), scale);
    mean.getResult().replaceAllUsesExcept(scaled, scaled);
    current_[scaled] = currentOf(mean);
    reduceEagerly(scaled);
    return success();
  }

  func::FuncOp func_;
  Mesh mesh_;
  OpBuilder b_;
  llvm::StringSet<> accumulators_; // names of the gradient accumulators this function reads
  llvm::DenseMap<Value, Layout> layouts_; // propagated (global) layouts
  llvm::DenseMap<Value, Layout> current_; // layouts of the partitioned values
  llvm::DenseMap<Value, Value> allReduced_;
  llvm::DenseMap<std::pair<Value, int64_t>, Value> allGathered_;
  llvm::DenseMap<Operation *, std::optional<ShardingRule>> rules_;
  llvm::DenseMap<Operation *, SmallVector<SmallVector<int64_t>>> factorSizes_;
};

struct CpcPartitionPass : cpc::impl::CpcPartitionBase<CpcPartitionPass> {
  using CpcPartitionBase::CpcPartitionBase;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<func::FuncOp> targets;
    for (const std::string &name : funcs) {
      auto func = module.lookupSymbol<func::FuncOp>(name);
      if (!func || func.isExternal()) {
        module.emitError("no function @") << name;
        return signalPassFailure();
      }
      targets.push_back(func);
    }
    if (funcs.empty())
      for (auto func : module.getOps<func::FuncOp>())
        if (!func.isExternal())
          targets.push_back(func);
    auto meshes = module.getOps<MeshOp>();
    MeshOp onlyMesh = std::distance(meshes.begin(), meshes.end()) == 1 ? *meshes.begin() : MeshOp();
    for (func::FuncOp func : targets) {
      FailureOr<MeshOp> mesh = findAnnotatedMesh(func);
      if (failed(mesh))
        return signalPassFailure();
      // A function without annotations (e.g. an update that reads accumulated partial sums)
      // runs over the module's one mesh; without one there is nothing to partition it over.
      if (!*mesh && !onlyMesh) {
        if (funcs.empty())
          continue;
        func.emitError("has no sharding annotations and the module has no single cpc.mesh");
        return signalPassFailure();
      }
      if (failed(partitionFunction(func, Mesh(*mesh ? *mesh : onlyMesh))))
        return signalPassFailure();
    }
  }
};

} // namespace

LogicalResult cpc::partitionFunction(func::FuncOp func, const Mesh &mesh) { return Partitioner(func, mesh).run(); }
