//===- Partition.cpp - the per-rank program of a sharded function ---------===//
//
// Reads the layouts that cpc-propagate-sharding recorded and rewrites the function into the
// program every rank runs: local types, this rank's block of whole values that meet split
// uses, all-gathers of split values that an op needs whole, and all-reduces only where a
// partial sum meets an op that is not linear in it, a result or an assign.
//
// Over 800 lines: one class whose steps share the layouts (propagated and current), the
// builder and the memo of collectives already placed; its rules and strategies live elsewhere
// (Sharding.cpp, MatMulStrategies.cpp).
//
#include "dialects/cpc/Cost.h"
#include "dialects/cpc/Roles.h"
#include "passes/Passes.h"
#include "passes/ReshardCost.h"
#include "passes/Sharding.h"
#include "passes/MatMulStrategies.h"

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
  Partitioner(func::FuncOp func, const Mesh &mesh, VariableSplits &splits)
      : func_(func), mesh_(mesh), b_(func.getContext()), variables_(func->getParentOfType<ModuleOp>()),
        accumulators_(stateNamesWithRole(func, StateRole::GradAccumulator)), splits_(splits) {}

  LogicalResult run() {
    if (failed(readLayouts()))
      return failure();
    Block &block = func_.getBody().front();
    // Rules read shapes: take them all while every type is still global.
    for (Operation &op : block)
      rules_[&op] = getShardingRule(&op);
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
  /// The propagated layouts. Only argument and state annotations may say "partial"; whether a
  /// result is one is decided here again, since all-reduces placed for some users change it for
  /// others.
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
        if (!l->partial.empty())
          propagatedPartial_[r] = l->partial; // what summedPartial looks ahead at
        if (!llvm::isa<StateOp>(op))
          l->clearPartial();
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
    Layout l = currentOf(v);
    Value r = b_.create<AllReduceOp>(before->getLoc(), ValueRange{v}, mesh_.ref(),
                                     b_.getStrArrayAttr(SmallVector<StringRef>(l.partial.begin(), l.partial.end())),
                                     ReductionKindAttr::get(b_.getContext(), l.reduction))
                  .getResult(0);
    l.clearPartial();
    current_[r] = l;
    allReduced_[v] = r;
    return r;
  }

  /// The dim along which a reduce-scatter turns `have` (partial sums) into `want` (ReshardCost.h:
  /// the search prices the same rule).
  std::optional<int64_t> scatterDim(const Layout &have, const Layout &want) const {
    return reduceScatterDim(have, want, mesh_);
  }

  /// The sum of partial `v`, this rank keeping its block of `dim` (a reduce-scatter), built once
  /// and reused (ZeRO-2's gradient feeds both its norm term and the update).
  Value reduceScattered(Value v, int64_t dim, Operation *before) {
    auto key = std::make_pair(v, dim);
    auto it = reduceScattered_.find(key);
    if (it != reduceScattered_.end())
      return it->second;
    Layout l = currentOf(v);
    auto type = tensorType(v);
    SmallVector<int64_t> shape(type.getShape());
    shape[dim] /= mesh_.parts(l.partial);
    // Right where the partial sum is produced (as reduceEagerly's all-reduces): ZeRO-2's
    // gradients then go out in backward's order and in buckets, and their whole partial sums die
    // early.
    if (Operation *def = v.getDefiningOp())
      b_.setInsertionPointAfter(def);
    else
      b_.setInsertionPoint(before);
    Value r = b_.create<ReduceScatterOp>(before->getLoc(), RankedTensorType::get(shape, type.getElementType()), v,
                                         mesh_.ref(),
                                         b_.getStrArrayAttr(SmallVector<StringRef>(l.partial.begin(), l.partial.end())),
                                         dim ? b_.getI64IntegerAttr(dim) : IntegerAttr());
    l.dims[dim] = l.partial;
    l.clearPartial();
    current_[r] = l;
    reduceScattered_[key] = r;
    return r;
  }

  /// `v` made whole along `dim` by gathering every rank's block (the resharding rule), built
  /// once and reused unless `fresh` (a cpc.shard asks for the gather where it stands).
  Value gathered(Value v, int64_t dim, Operation *before, bool fresh = false) {
    auto key = std::make_pair(v, dim);
    auto it = allGathered_.find(key);
    if (it != allGathered_.end() && !fresh)
      return it->second;
    Layout l = currentOf(v);
    MeshAxes axes = l.dims[dim];
    if (!mesh_.inOrder(axes)) { // one axis at a time, minor first: each gather joins whole blocks
      Value g = v;
      for (size_t i = axes.size(); i-- > 0;)
        g = gatheredMinor(g, dim, before);
      if (!fresh)
        allGathered_[key] = g;
      return g;
    }
    auto type = tensorType(v);
    SmallVector<int64_t> shape(type.getShape());
    shape[dim] *= mesh_.parts(axes);
    b_.setInsertionPoint(before);
    Value g = b_.create<AllGatherOp>(before->getLoc(), RankedTensorType::get(shape, type.getElementType()), v,
                                     mesh_.ref(), b_.getStrArrayAttr(SmallVector<StringRef>(axes.begin(), axes.end())),
                                     dim ? b_.getI64IntegerAttr(dim) : IntegerAttr());
    l.dims[dim].clear();
    current_[g] = l;
    if (!fresh)
      allGathered_[key] = g;
    return g;
  }

  /// `v` gathered over the minor axis of dim `dim` only.
  Value gatheredMinor(Value v, int64_t dim, Operation *before) {
    Layout l = currentOf(v);
    std::string minor = l.dims[dim].back();
    auto type = tensorType(v);
    SmallVector<int64_t> shape(type.getShape());
    shape[dim] *= mesh_.parts({minor});
    b_.setInsertionPoint(before);
    Value g = b_.create<AllGatherOp>(before->getLoc(), RankedTensorType::get(shape, type.getElementType()), v,
                                     mesh_.ref(), b_.getStrArrayAttr({minor}),
                                     dim ? b_.getI64IntegerAttr(dim) : IntegerAttr());
    l.dims[dim].pop_back();
    current_[g] = l;
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
    Layout l = want; // the dims of `want`, the partial axes of `v`
    l.partial = have.partial;
    l.reduction = have.reduction;
    current_[s] = l;
    return s;
  }

  /// `v` with the split of dim `from` moved to dim `to` (an all-to-all over its axes).
  Value movedSplit(Value v, int64_t from, int64_t to, Operation *before) {
    Layout l = currentOf(v);
    MeshAxes axes = l.dims[from];
    auto type = tensorType(v);
    SmallVector<int64_t> shape(type.getShape());
    shape[from] *= mesh_.parts(axes);
    shape[to] /= mesh_.parts(axes);
    b_.setInsertionPoint(before);
    Value moved = b_.create<AllToAllOp>(before->getLoc(), RankedTensorType::get(shape, type.getElementType()), v,
                                        mesh_.ref(), b_.getStrArrayAttr(SmallVector<StringRef>(axes.begin(), axes.end())),
                                        b_.getI64IntegerAttr(to), b_.getI64IntegerAttr(from));
    l.dims[to] = axes;
    l.dims[from].clear();
    current_[moved] = l;
    return moved;
  }

  /// `v` laid out as `want` (dims only) for `op`, operand `index`, the cheapest way: a split that
  /// moves to a dim that is whole goes by all-to-all; dims the op needs whole or split otherwise
  /// are gathered, then dims it needs split are sliced (a partial value reduced first).
  FailureOr<Value> resharded(Value v, const Layout &want, Operation *op, unsigned index, bool fresh = false) {
    for (size_t from = 0; from < want.dims.size(); ++from) {
      Layout now = currentOf(v);
      if (now.dims[from].empty() || !want.dims[from].empty())
        continue;
      for (size_t to = 0; to < want.dims.size(); ++to)
        if (to != from && now.dims[to].empty() && want.dims[to] == now.dims[from] && mesh_.inOrder(now.dims[from]) &&
            tensorType(v).getDimSize(to) % mesh_.parts(now.dims[from]) == 0) {
          v = movedSplit(v, from, to, op);
          break;
        }
    }
    Layout have = currentOf(v);
    for (size_t d = 0; d < want.dims.size(); ++d) {
      if (have.dims[d].empty() || want.dims[d] == have.dims[d])
        continue;
      // Wanted split over the major axes only (a 2D bias stored over (tp_col, tp_row), read over
      // tp_col): gather the minor ones.
      if (!want.dims[d].empty() && want.dims[d].size() < have.dims[d].size() &&
          std::equal(want.dims[d].begin(), want.dims[d].end(), have.dims[d].begin()))
        while (currentOf(v).dims[d].size() > want.dims[d].size())
          v = gatheredMinor(v, d, op);
      else
        v = gathered(v, d, op, fresh);
    }
    if (currentOf(v).dims != want.dims) {
      // Each rank's block of its own partial value is not a partial value of the block: reduce
      // first. (A reduce-scatter would move less; the all-reduce is kept for other users.)
      if (!currentOf(v).partial.empty())
        v = reduced(v, op);
      v = sliced(v, want, op);
    }
    return v;
  }

  // Over 80 lines: one op's partitioning in order (variables, ops without a rule, the factors'
  // axes, operands resharded, results laid out, the op's own adaptations); each step is short.
  LogicalResult partitionOp(Operation *op) {
    op->removeAttr(kResultShardingsAttr); // propagation's layouts: the partitioned ones replace them
    if (auto assign = llvm::dyn_cast<AssignOp>(op))
      return partitionAssign(assign);
    if (llvm::isa<func::ReturnOp>(op))
      return partitionResults(op);
    if (auto shard = llvm::dyn_cast<ShardOp>(op))
      return partitionShard(shard);
    if (op->getNumResults() == 0)
      return success();
    // A variable holds what its layout says: split dims are stored as this rank's block (the op
    // records global_shape and sharding for the plan); gradient accumulators hold partial sums
    // over the data-parallel axes (see partitionAssign), as the pass that seeds those axes marks.
    if (llvm::isa<ParameterOp, StateOp>(op))
      return partitionVariable(op);
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
    if (auto mm = llvm::dyn_cast<MatMulOp>(op)) {
      FailureOr<bool> done = partitionByStrategy(mm);
      if (failed(done))
        return failure();
      if (*done)
        return success();
    }
    if (partialOperandsMustAgree(op))
      alignPartialSums(op);
    // Operands: partial values the op does not pass on are reduced first.
    SmallVector<Layout> operandLayouts;
    for (OpOperand &use : op->getOpOperands())
      operandLayouts.push_back(currentOf(use.get()));
    SmallVector<bool> kept = partialOperandsKept(op, rule.has_value(), operandLayouts);
    SmallVector<bool> reduceFirst;
    for (auto [i, use] : llvm::enumerate(op->getOpOperands()))
      reduceFirst.push_back(!operandLayouts[i].partial.empty() && !kept[i]);

    // An op without a rule computes on whole values: gather the split ones.
    if (!rule) {
      for (auto [i, use] : llvm::enumerate(op->getOpOperands()))
        if (reduceFirst[i])
          use.set(reduced(use.get(), op));
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
    FactorAxes factorAxes = factorAxesOf(
        op, *rule, mesh_, /*resultsFirst=*/true, [&](Value r) { return layoutOf(r); },
        [&](OpOperand &operand) { return currentOf(operand.get()); });

    // A partial sum on its way into a sum with other partial sums is kept whole and partial up
    // to that sum (which then is too), and reduced once where the sum is used.
    if (std::optional<MeshAxes> axes = summedPartial(op, kept))
      dropFactorAxes(factorAxes, *axes);
    // A partial operand the op would pass on is reduced first where that cannot be: when the op
    // wants it split over exactly its partial axes (a gradient scaled by the clip coefficient,
    // under ZeRO: reduce-scattered, as slicing a partial value needs its whole sum first), or
    // when a result would be split over one of them (a partial [N, 1] broadcast into a
    // vocab-split [N, V]: no value is both split and partial over one axis).
    MeshAxes resultAxes;
    for (unsigned r = 0; r < op->getNumResults(); ++r)
      for (const MeshAxes &axes : resultLayout(*rule, r, factorAxes, nullptr).dims)
        resultAxes.append(axes.begin(), axes.end());
    for (auto [i, use] : llvm::enumerate(op->getOpOperands())) {
      if (!kept[i])
        continue;
      Layout have = currentOf(use.get());
      bool clash = llvm::any_of(have.partial, [&](const std::string &a) { return llvm::is_contained(resultAxes, a); });
      if (clash || scatterDim(have, operandLayout(*rule, i, factorAxes, have))) {
        kept[i] = false;
        reduceFirst[i] = true;
      }
    }
    // Operands must be laid out as the factors say. A partial operand the op does not pass on is
    // reduced first: reduce-scattered when the op wants it split over its partial axes (half an
    // all-reduce's traffic; sequence parallelism's row-parallel outputs), else all-reduced.
    SmallVector<std::tuple<Value, Layout, Value>> laidOut; // an operand read twice (x * x) is laid out once
    for (auto [i, use] : llvm::enumerate(op->getOpOperands())) {
      Layout want = operandLayout(*rule, i, factorAxes, currentOf(use.get()));
      auto same = llvm::find_if(laidOut, [&](const auto &t) { return std::get<0>(t) == use.get() && std::get<1>(t) == want; });
      if (same != laidOut.end()) {
        use.set(std::get<2>(*same));
        continue;
      }
      Value original = use.get();
      if (reduceFirst[i]) {
        std::optional<int64_t> dim = scatterDim(currentOf(use.get()), want);
        use.set(dim ? reduceScattered(use.get(), *dim, op) : reduced(use.get(), op));
      }
      FailureOr<Value> v = resharded(use.get(), want, op, i);
      if (failed(v))
        return failure();
      use.set(*v);
      laidOut.emplace_back(original, want, *v);
    }
    // A partial operand that had to be sliced was reduced first (resharded); add-like ops then
    // take no partial operand at all, or the ranks' sums would count the whole one n times.
    if (partialOperandsMustAgree(op)) {
      SmallVector<Layout> now;
      for (OpOperand &use : op->getOpOperands())
        now.push_back(currentOf(use.get()));
      if (llvm::any_of(now, [&](const Layout &l) { return l.partial != now.front().partial; }))
        for (auto [i, use] : llvm::enumerate(op->getOpOperands()))
          if (!now[i].partial.empty())
            use.set(reduced(use.get(), op));
    }

    // Results: local types and partial sums.
    std::optional<Layout> passed;
    for (auto [i, use] : llvm::enumerate(op->getOpOperands()))
      if (kept[i])
        passed = currentOf(use.get());
    SmallVector<Attribute> recorded;
    bool anySharded = false;
    for (auto [i, r] : llvm::enumerate(op->getResults())) {
      Layout l = resultLayout(*rule, i, factorAxes, passed ? &*passed : nullptr);
      r.setType(localType(tensorType(r), l));
      current_[r] = l;
      recorded.push_back(l.toAttr(mesh_.ref()));
      anySharded |= l.isSharded();
    }
    // The layout of the results, for --dump-sharding and the plan's metadata.
    if (anySharded)
      op->setAttr(kResultShardingsAttr, b_.getArrayAttr(recorded));
    // What the op's attributes say about shapes and blocks, and the scale of partial results,
    // are the op's own (ShardingRuleOpInterface).
    if (auto blocks = llvm::dyn_cast<ShardingRuleOpInterface>(op)) {
      SmallVector<ShardingAttr> laidOut, resultLayouts;
      for (Value v : op->getOperands())
        laidOut.push_back(currentOf(v).toAttr(mesh_.ref()));
      for (Value r : op->getResults())
        resultLayouts.push_back(currentOf(r).toAttr(mesh_.ref()));
      blocks.adaptToBlocks(laidOut, resultLayouts);
      scalePartialResults(op, blocks.partialResultScale(laidOut, resultLayouts));
    }
    // A partial sum that some user will need whole is reduced right where it is produced: the
    // gradient all-reduces then go out in the order backward produces them, not all at the end.
    for (Value r : op->getResults())
      reduceEagerly(r);
    return success();
  }

  /// The partial axes `op` passes on (its `kept` operands') when it sums partial sums alike or
  /// its result is summed with others later (summedWithPartials): it then computes on the whole
  /// partial values.
  std::optional<MeshAxes> summedPartial(Operation *op, ArrayRef<bool> kept) {
    const bool *first = llvm::find(kept, true);
    if (first == kept.end())
      return std::nullopt;
    Layout passed = currentOf(op->getOperand(first - kept.begin()));
    if (passed.reduction != ReductionKind::Sum)
      return std::nullopt;
    MeshAxes axes = passed.partial;
    bool sums = llvm::isa<AddOp, SubOp>(op) && llvm::all_of(kept, [](bool k) { return k; });
    auto partialOf = [&](Value v) { return current_.count(v) ? currentOf(v).partial : propagatedPartial_.lookup(v); };
    if (sums || summedWithPartials(op, axes, partialOf))
      return axes;
    return std::nullopt;
  }

  /// A matmul partitioned by a strategy of its own (SUMMA on the 2D axes, 3D on the 3D ones):
  /// true when it was, and `mm` is gone.
  FailureOr<bool> partitionByStrategy(MatMulOp mm) {
    // function_ref does not own: the lambdas live here, for the call.
    auto current = [&](Value v) { return currentOf(v); };
    auto propagated = [&](Value v) { return layoutOf(v); };
    auto reshard = [&](Value v, const Layout &want, Operation *user) { return resharded(v, want, user, 0); };
    auto setCurrent = [&](Value v, const Layout &l) { current_[v] = l; };
    PartitionHooks hooks{current, propagated, reshard, setCurrent};
    FailureOr<Value> replaced = cpc::partitionByStrategy(mm, mesh_, hooks);
    if (failed(replaced))
      return failure();
    if (!*replaced)
      return false;
    mm.getResult().replaceAllUsesWith(*replaced);
    rules_.erase(mm);
    mm.erase();
    reduceEagerly(*replaced);
    return true;
  }

  /// Partial sums over different axes meet in an add (the global norm's terms: partial over dp
  /// under ZeRO-2, over dp and tp for a tp-split parameter, whole for a replicated one).
  /// Scalars become partial over all those axes: a term replicated over some of them is scaled
  /// by 1/their size, so that the sum is reduced once (as Megatron counts replicated
  /// parameters' squares once). Other values are reduced over the axes the others lack only.
  void alignPartialSums(Operation *op) {
    SmallVector<Layout> now;
    for (Value v : op->getOperands())
      now.push_back(currentOf(v));
    if (llvm::all_of(now, [](const Layout &l) { return l.partial.empty(); }) ||
        llvm::any_of(now, [](const Layout &l) { return !l.partial.empty() && l.reduction != ReductionKind::Sum; }) ||
        llvm::all_of(now, [&](const Layout &l) { return l.partial == now.front().partial; }))
      return;
    bool scalars = llvm::all_of(op->getOperands(), [](Value v) { return tensorType(v).getRank() == 0; });
    MeshAxes target; // scalars: the union of the partial axes; else: the common ones
    if (scalars) {
      for (const Layout &l : now)
        for (const std::string &a : l.partial)
          if (!llvm::is_contained(target, a))
            target.push_back(a);
      llvm::sort(target, [&](const std::string &x, const std::string &y) {
        return mesh_.axisIndex(x) < mesh_.axisIndex(y);
      });
    } else {
      if (llvm::any_of(now, [](const Layout &l) { return l.partial.empty(); }))
        return;
      target = now.front().partial;
      for (const Layout &l : now)
        llvm::erase_if(target, [&](const std::string &a) { return !llvm::is_contained(l.partial, a); });
      if (target.empty())
        return;
    }
    for (auto [i, use] : llvm::enumerate(op->getOpOperands())) {
      if (now[i].partial == target)
        continue;
      MeshAxes diff; // scalars: the axes to scale for; else: the axes to reduce over
      for (const std::string &a : scalars ? target : now[i].partial)
        if (!llvm::is_contained(scalars ? now[i].partial : target, a))
          diff.push_back(a);
      b_.setInsertionPoint(op);
      Value r;
      if (scalars) {
        Type et = tensorType(use.get()).getElementType();
        Value inverse = b_.create<ConstantOp>(
            op->getLoc(), DenseElementsAttr::get(RankedTensorType::get({}, et), b_.getFloatAttr(et, 1.0 / mesh_.parts(diff))));
        r = b_.create<MulOp>(op->getLoc(), use.get(), inverse);
      } else {
        r = b_.create<AllReduceOp>(op->getLoc(), ValueRange{use.get()}, mesh_.ref(),
                                   b_.getStrArrayAttr(SmallVector<StringRef>(diff.begin(), diff.end())))
                .getResult(0);
      }
      Layout l = now[i];
      l.partial = target;
      l.reduction = ReductionKind::Sum;
      current_[r] = l;
      use.set(r);
    }
  }

  /// A parameter or state read: split variables become this rank's block, stored so (the
  /// variable's type and sharding) for every function.
  LogicalResult partitionVariable(Operation *op) {
    Value v = op->getResult(0);
    Layout l = layoutOf(v);
    VariableOp variable;
    if (auto param = llvm::dyn_cast<ParameterOp>(op)) {
      l.clearPartial();
      variable = variables_.lookup<VariableOp>(param.getNameAttr().getAttr());
    } else {
      variable = variables_.lookup<VariableOp>(llvm::cast<StateOp>(op).getNameAttr().getAttr());
    }
    Layout dims = l;
    dims.clearPartial();
    ShardingAttr sharding = l.isSplit() ? dims.toAttr(mesh_.ref()) : ShardingAttr();
    std::string problem = splitVariable(op, variable, sharding, localType(tensorType(v), l), splits_);
    if (!problem.empty())
      return op->emitError("reads ") << variable.getSymNameAttr() << " as " << l.describe() << ": " << problem;
    current_[v] = l;
    variableLayouts_[variable.getSymName()] = l;
    return success();
  }

  /// An assign writes this rank's part of its variable: the value laid out as the variable is
  /// read in this function (whole when it is not read here), and reduced unless the variable is a
  /// gradient accumulator, which keeps each rank's partial sum until the update reads it.
  LogicalResult partitionAssign(AssignOp assign) {
    OpOperand &use = assign->getOpOperand(0);
    auto it = variableLayouts_.find(assign.getName());
    Layout want = it != variableLayouts_.end() ? it->second : Layout::whole(tensorType(use.get()).getRank());
    bool accumulates = isAccumulator(assign.getName()) && !want.partial.empty() &&
                       want.reduction == ReductionKind::Sum && currentOf(use.get()).reduction == ReductionKind::Sum;
    if (accumulates)
      use.set(partialOver(use.get(), want.partial, assign));
    else if (!currentOf(use.get()).partial.empty())
      use.set(reduced(use.get(), assign));
    FailureOr<Value> v = resharded(use.get(), want, assign, 0);
    if (failed(v))
      return failure();
    use.set(*v);
    if (accumulates && currentOf(use.get()).partial != want.partial) // a slice summed it first
      use.set(partialOver(use.get(), want.partial, assign));
    if (currentOf(use.get()).dims != want.dims)
      return assign.emitError("cannot lay out the value as its variable: ") << currentOf(use.get()).describe()
                                                                           << " vs " << want.describe();
    return success();
  }

  /// Partial sum `v` as a partial sum over exactly `axes` (what a gradient accumulator holds):
  /// summed over the partial axes it has beyond them, and where it is whole over some of them
  /// (already summed there, or never split), scaled by 1/their size so that the ranks' values
  /// still add up to it once.
  Value partialOver(Value v, const MeshAxes &axes, Operation *before) {
    Layout l = currentOf(v);
    MeshAxes extra, missing;
    for (const std::string &a : l.partial)
      if (!llvm::is_contained(axes, a))
        extra.push_back(a);
    for (const std::string &a : axes)
      if (!llvm::is_contained(l.partial, a))
        missing.push_back(a);
    b_.setInsertionPoint(before);
    if (!extra.empty()) {
      v = b_.create<AllReduceOp>(before->getLoc(), ValueRange{v}, mesh_.ref(),
                                 b_.getStrArrayAttr(SmallVector<StringRef>(extra.begin(), extra.end())))
              .getResult(0);
      llvm::erase_if(l.partial, [&](const std::string &a) { return llvm::is_contained(extra, a); });
    }
    if (!missing.empty()) {
      Type et = tensorType(v).getElementType();
      Value inverse = b_.create<ConstantOp>(before->getLoc(), DenseElementsAttr::get(RankedTensorType::get({}, et),
                                                                 b_.getFloatAttr(et, 1.0 / mesh_.parts(missing))));
      v = b_.create<MulOp>(before->getLoc(), v, inverse);
    }
    l.partial = axes;
    l.reduction = ReductionKind::Sum;
    current_[v] = l;
    return v;
  }

  /// Results are never partial. A training function's stay split (the runtime reads only
  /// scalars of them); an inference program's are the model's outputs, returned whole.
  LogicalResult partitionResults(Operation *ret) {
    for (OpOperand &use : ret->getOpOperands()) {
      Value v = currentOf(use.get()).partial.empty() ? use.get() : reduced(use.get(), ret);
      FailureOr<Value> laidOut = getPhase(func_) == Phase::Infer && currentOf(v).isSharded()
                                     ? resharded(v, Layout::whole(tensorType(v).getRank()), ret, 0, true)
                                     : FailureOr<Value>(v);
      if (failed(laidOut))
        return failure();
      use.set(*laidOut);
    }
    return success();
  }

  /// cpc.shard: its input laid out as the annotation says (reduced, gathered or sliced); the op
  /// itself has no place in the per-rank program.
  LogicalResult partitionShard(ShardOp shard) {
    Value v = shard.getInput();
    FailureOr<Layout> want = readLayout(shard.getSharding(), shard.getResult(), mesh_, shard);
    if (failed(want))
      return failure();
    if (!currentOf(v).partial.empty() && want->partial.empty()) {
      std::optional<int64_t> dim = scatterDim(currentOf(v), *want);
      v = dim ? reduceScattered(v, *dim, shard) : reduced(v, shard);
    }
    if (currentOf(v).partial != want->partial || (!want->partial.empty() && currentOf(v).reduction != want->reduction))
      return shard.emitError("cannot turn ") << currentOf(v).describe() << " into " << want->describe()
                                             << ": only ops make partial sums";
    FailureOr<Value> laidOut = resharded(v, *want, shard, 0, /*fresh=*/true);
    if (failed(laidOut))
      return failure();
    shard.getResult().replaceAllUsesWith(*laidOut);
    shard.erase();
    return success();
  }

  void reduceEagerly(Value v) {
    if (currentOf(v).partial.empty() ||
        llvm::none_of(v.getUses(), [&](OpOperand &use) { return needsWhole(use) && !scatteredFor(use); }))
      return;
    // Reduce where the partial sum holds the fewest bytes along the chain of ops that passed it
    // on from one operand used by them alone (a 16-bit gradient widened to f32 and unscaled for
    // the update; a broadcast): the sum is the same, the ops being linear in it.
    SmallVector<Value> chain{v};
    OpOperand *narrowest = nullptr;
    size_t wholeUpTo = 0;
    int64_t fewest = valueBytes(v);
    for (OpOperand *source = partialSource(v); source; source = partialSource(source->get())) {
      if (valueBytes(source->get()) < fewest) {
        narrowest = source;
        fewest = valueBytes(source->get());
        wholeUpTo = chain.size();
      }
      chain.push_back(source->get());
    }
    if (!narrowest) {
      reduced(v, v.getDefiningOp()->getNextNode());
      return;
    }
    narrowest->set(reduced(narrowest->get(), narrowest->getOwner()));
    for (size_t i = 0; i < wholeUpTo; ++i) {
      Layout l = currentOf(chain[i]);
      l.clearPartial();
      current_[chain[i]] = l;
      Operation *def = chain[i].getDefiningOp();
      if (l.isSharded())
        def->setAttr(kResultShardingsAttr, b_.getArrayAttr({l.toAttr(mesh_.ref())}));
      else
        def->removeAttr(kResultShardingsAttr);
    }
  }

  /// The one partial operand of v's op that v's partial sum was passed on from (the same partial
  /// axes), when that op is its only use.
  OpOperand *partialSource(Value v) {
    Operation *def = v.getDefiningOp();
    if (!def || def->getNumResults() != 1)
      return nullptr;
    OpOperand *source = nullptr;
    for (OpOperand &operand : def->getOpOperands())
      if (!currentOf(operand.get()).partial.empty()) {
        if (source)
          return nullptr;
        source = &operand;
      }
    if (!source || !source->get().hasOneUse())
      return nullptr;
    const Layout &have = currentOf(source->get()), &passed = currentOf(v);
    return have.partial == passed.partial && have.reduction == passed.reduction ? source : nullptr;
  }

  /// Whether the user of partial `use` will want it split over exactly its partial axes, so that
  /// it reduce-scatters the value itself (partitionOp) instead of reading an all-reduced copy.
  bool scatteredFor(OpOperand &use) {
    Operation *user = use.getOwner();
    if (auto shard = llvm::dyn_cast<ShardOp>(user)) { // partitionShard reduce-scatters where it can
      FailureOr<Layout> want = readLayout(shard.getSharding(), shard.getResult(), mesh_, shard);
      return succeeded(want) && scatterDim(currentOf(use.get()), *want).has_value();
    }
    auto it = rules_.find(user);
    if (it == rules_.end() || !it->second)
      return false;
    // As partitionOp will see it: this operand as it is now, the rest as propagation laid out.
    FactorAxes factorAxes = factorAxesOf(
        user, *it->second, mesh_, /*resultsFirst=*/true, [&](Value r) { return layoutOf(r); },
        [&](OpOperand &operand) { return &operand == &use ? currentOf(operand.get()) : layoutOf(operand.get()); });
    Layout have = currentOf(use.get());
    return scatterDim(have, operandLayout(*it->second, use.getOperandNumber(), factorAxes, have)).has_value();
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
    auto it = current_.find(use.get());
    ReductionKind kind = it != current_.end() ? it->second.reduction : ReductionKind::Sum;
    if (!propagatesPartial(user, use.getOperandNumber(), kind))
      return true;
    // x * x (a squared norm) is not linear in x.
    return llvm::isa<MulOp, MatMulOp>(user) && user->getOperand(0) == user->getOperand(1);
  }

  static bool partialOperandsMustAgree(Operation *op) {
    auto rule = llvm::dyn_cast<ShardingRuleOpInterface>(op);
    return rule && rule.partialOperandsMustAgree();
  }

  /// Multiplies the partial results of `op` by `scale` (when it is not 1), so that the ranks'
  /// values add up to the whole one.
  void scalePartialResults(Operation *op, double scale) {
    if (scale == 1.0)
      return;
    for (Value r : op->getResults()) {
      if (currentOf(r).partial.empty())
        continue;
      b_.setInsertionPointAfter(op);
      Type et = tensorType(r).getElementType();
      Value factor = b_.create<ConstantOp>(op->getLoc(), DenseElementsAttr::get(RankedTensorType::get({}, et),
                                                                               b_.getFloatAttr(et, scale)));
      auto scaled = b_.create<MulOp>(op->getLoc(), r, factor);
      r.replaceAllUsesExcept(scaled, scaled);
      current_[scaled] = currentOf(r);
      reduceEagerly(scaled);
    }
  }

  func::FuncOp func_;
  Mesh mesh_;
  OpBuilder b_;
  mlir::SymbolTable variables_;    // the module's: a read's variable by name, not by a scan of the module
  llvm::StringSet<> accumulators_; // names of the gradient accumulators this function reads
  llvm::DenseMap<Value, Layout> layouts_; // propagated (global) layouts
  llvm::DenseMap<Value, Layout> current_; // layouts of the partitioned values
  llvm::DenseMap<Value, MeshAxes> propagatedPartial_; // partial sums propagation marked
  llvm::DenseMap<Value, Value> allReduced_;
  llvm::StringMap<Layout> variableLayouts_; // layouts of the variables read so far, by name
  VariableSplits &splits_;                  // how every function so far read each variable
  llvm::DenseMap<std::pair<Value, int64_t>, Value> allGathered_;
  llvm::DenseMap<std::pair<Value, int64_t>, Value> reduceScattered_;
  llvm::DenseMap<Operation *, std::optional<ShardingRule>> rules_;
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
    VariableSplits splits;
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
      if (failed(partitionFunction(func, Mesh(*mesh ? *mesh : onlyMesh), splits)))
        return signalPassFailure();
    }
  }
};

} // namespace

LogicalResult cpc::partitionFunction(func::FuncOp func, const Mesh &mesh, VariableSplits &splits) {
  return Partitioner(func, mesh, splits).run();
}
