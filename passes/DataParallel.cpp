//===- DataParallel.cpp - batch sharding: propagation and partitioning ----===//
//
// Data parallelism as sharding: split the batch dim of the inputs over the `dp` mesh axis,
// propagate over the ops' factor rules (ShardingRules.cpp), partition into the per-rank program.
// Partial sums come from splitting reduction factors; an all-reduce is inserted only where a
// partial sum meets an op that is not linear in it, a result or an assign.
//
#include "dialects/cpc/ShardingRules.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

namespace cpc {
#define GEN_PASS_DEF_CPCDATAPARALLEL
#include "passes/Passes.h.inc"
} // namespace cpc

using namespace mlir;
using namespace cpc;

namespace {

/// Mesh axes per dim of a value (empty list: the dim is whole) and partial-sum axes.
struct Layout {
  SmallVector<SmallVector<std::string>> dims;
  SmallVector<std::string> partial;
  bool isSplit() const {
    return llvm::any_of(dims, [](const auto &d) { return !d.empty(); });
  }
};

RankedTensorType tensorType(Value v) { return llvm::cast<RankedTensorType>(v.getType()); }

class Partitioner {
public:
  Partitioner(ModuleOp module, int64_t size) : module_(module), size_(size), b_(module.getContext()) {}

  LogicalResult run(func::FuncOp func) {
    seed(func);
    propagate(func);
    recordShardings(func);
    return partition(func);
  }

private:
  int64_t parts(ArrayRef<std::string> axes) { return axes.empty() ? 1 : size_; } // one axis: dp

  /// Dim 0 of every user input (not lr/step) is split over dp.
  void seed(func::FuncOp func) {
    for (BlockArgument arg : func.getArguments()) {
      if (func.getArgAttr(arg.getArgNumber(), "cpc.runtime"))
        continue;
      auto t = tensorType(arg);
      if (t.getRank() == 0 || t.getDimSize(0) % size_)
        continue;
      Layout l;
      l.dims.resize(t.getRank());
      l.dims[0] = {"dp"};
      layouts_[arg] = l;
    }
  }

  /// Values propagation may not split: parameters, states and inputs left whole.
  bool fixed(Value v) {
    if (llvm::isa<BlockArgument>(v))
      return true;
    return llvm::isa<ParameterOp, StateOp>(v.getDefiningOp());
  }

  /// Assigns layouts from the factors of each op's rule, both directions, to a fixpoint.
  void propagate(func::FuncOp func) {
    SmallVector<Operation *> ops;
    for (Operation &op : func.getBody().front())
      ops.push_back(&op);
    for (int iteration = 0; iteration < 8; ++iteration) {
      bool changed = false;
      auto visit = [&](Operation *op) {
        std::optional<ShardingRule> rule = getShardingRule(op);
        if (!rule)
          return;
        SmallVector<SmallVector<std::string>> factorAxes(rule->numFactors());
        auto collect = [&](Value v, ArrayRef<int64_t> factors) {
          auto it = layouts_.find(v);
          if (it == layouts_.end())
            return;
          for (auto [d, f] : llvm::enumerate(factors))
            if (f >= 0 && factorAxes[f].empty() && !it->second.dims[d].empty())
              factorAxes[f] = it->second.dims[d];
        };
        for (auto [v, factors] : llvm::zip(op->getOperands(), rule->operands))
          collect(v, factors);
        for (auto [v, factors] : llvm::zip(op->getResults(), rule->results))
          collect(v, factors);
        auto assign = [&](Value v, ArrayRef<int64_t> factors) {
          if (layouts_.count(v) || fixed(v))
            return;
          auto t = tensorType(v);
          Layout l;
          l.dims.resize(t.getRank());
          for (auto [d, f] : llvm::enumerate(factors))
            if (f >= 0 && !factorAxes[f].empty() && t.getDimSize(d) % parts(factorAxes[f]) == 0)
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

  ShardingAttr toAttr(const Layout &l) {
    SmallVector<Attribute> dims;
    for (const auto &axes : l.dims) {
      SmallVector<Attribute> names;
      for (const auto &a : axes)
        names.push_back(b_.getStringAttr(a));
      dims.push_back(b_.getArrayAttr(names));
    }
    SmallVector<Attribute> partial;
    for (const auto &a : l.partial)
      partial.push_back(b_.getStringAttr(a));
    return ShardingAttr::get(b_.getContext(), FlatSymbolRefAttr::get(b_.getContext(), "mesh"), b_.getArrayAttr(dims),
                             partial.empty() ? ArrayAttr() : b_.getArrayAttr(partial));
  }

  /// Records the propagated layouts on the IR (what --dump-sharding and lit tests read).
  void recordShardings(func::FuncOp func) {
    for (BlockArgument arg : func.getArguments())
      if (layouts_.count(arg))
        func.setArgAttr(arg.getArgNumber(), "cpc.sharding", toAttr(layouts_[arg]));
  }

  static std::string describe(const Layout &l) {
    std::string s = "[";
    for (size_t d = 0; d < l.dims.size(); ++d) {
      s += d ? ", " : "";
      s += l.dims[d].empty() ? "-" : l.dims[d].front();
    }
    return s + "]";
  }

  Layout layoutOf(Value v) {
    auto it = layouts_.find(v);
    if (it != layouts_.end())
      return it->second;
    Layout l;
    l.dims.resize(tensorType(v).getRank());
    return l;
  }

  RankedTensorType localType(RankedTensorType global, const Layout &l) {
    SmallVector<int64_t> shape(global.getShape());
    for (size_t d = 0; d < shape.size(); ++d)
      shape[d] /= parts(l.dims[d]);
    return RankedTensorType::get(shape, global.getElementType());
  }

  /// The all-reduced (whole) form of a partial value, built once and reused.
  Value reduced(Value v, Operation *before) {
    auto it = allReduced_.find(v);
    if (it != allReduced_.end())
      return it->second;
    b_.setInsertionPoint(before);
    Value r = b_.create<AllReduceOp>(before->getLoc(), ValueRange{v}, FlatSymbolRefAttr::get(b_.getContext(), "mesh"),
                                     b_.getStrArrayAttr({"dp"}))
                  .getResult(0);
    Layout l = layoutOf(v);
    l.partial.clear();
    current_[r] = l;
    allReduced_[v] = r;
    return r;
  }

  /// This rank's block of a whole value `v` laid out as `want`.
  Value sliced(Value v, const Layout &want, Operation *before) {
    b_.setInsertionPoint(before);
    auto global = tensorType(v);
    Value s = b_.create<ShardSliceOp>(before->getLoc(), localType(global, want), v, toAttr(want));
    current_[s] = want;
    return s;
  }

  Layout currentOf(Value v) {
    auto it = current_.find(v);
    if (it != current_.end())
      return it->second;
    Layout l;
    l.dims.resize(tensorType(v).getRank());
    return l;
  }

  LogicalResult partition(func::FuncOp func) {
    Block &block = func.getBody().front();
    // Rules read shapes: take them all while every type is still global.
    for (Operation &op : block)
      rules_[&op] = getShardingRule(&op);
    // Block arguments become local.
    for (BlockArgument arg : block.getArguments()) {
      Layout l = layoutOf(arg);
      current_[arg] = l;
      arg.setType(localType(tensorType(arg), l));
    }
    SmallVector<Operation *> ops;
    for (Operation &op : block)
      ops.push_back(&op);
    for (Operation *op : ops)
      if (failed(partitionOp(op)))
        return failure();
    func.setFunctionType(FunctionType::get(func.getContext(), block.getArgumentTypes(),
                                           block.getTerminator()->getOperandTypes()));
    return success();
  }

  LogicalResult partitionOp(Operation *op) {
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
    if (op->getNumResults() == 0)
      return success();
    // Reads of gradient accumulators are partial sums (see the assign case above).
    if (auto state = llvm::dyn_cast<StateOp>(op); state && isAccumulator(state.getName())) {
      Layout l;
      l.dims.resize(tensorType(state).getRank());
      l.partial = {"dp"};
      current_[state] = l;
      return success();
    }
    // Values with no operands: constants and random tensors stay whole here; users slice them.
    if (op->getNumOperands() == 0) {
      for (Value r : op->getResults())
        current_[r] = layoutOf(r), current_[r].dims.assign(tensorType(r).getRank(), {});
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
    int numPartial = llvm::count(partialIn, true);
    bool addLike = llvm::isa<AddOp, SubOp>(op);
    bool keepPartial = numPartial > 0 && rule &&
                       (addLike ? numPartial == (int)op->getNumOperands() : numPartial == 1);
    for (auto [i, use] : llvm::enumerate(op->getOpOperands()))
      if (partialIn[i] && !(keepPartial && propagatesPartialSums(op, i)))
        use.set(reduced(use.get(), op));
    partialIn.clear();
    for (OpOperand &use : op->getOpOperands())
      partialIn.push_back(!currentOf(use.get()).partial.empty());

    if (!rule) {
      for (OpOperand &use : op->getOpOperands())
        if (currentOf(use.get()).isSplit())
          return op->emitError("has no sharding rule but gets a split operand (an all-gather would be needed)");
      for (Value r : op->getResults())
        current_[r] = layoutOf(r), current_[r].dims.assign(tensorType(r).getRank(), {});
      return success();
    }

    // The axes of each factor: from the propagated layouts of results, then operands.
    SmallVector<SmallVector<std::string>> factorAxes(rule->numFactors());
    auto collect = [&](const Layout &l, ArrayRef<int64_t> factors) {
      for (auto [d, f] : llvm::enumerate(factors))
        if (f >= 0 && factorAxes[f].empty() && !l.dims[d].empty())
          factorAxes[f] = l.dims[d];
    };
    for (auto [v, factors] : llvm::zip(op->getResults(), rule->results))
      collect(layoutOf(v), factors);
    for (auto [v, factors] : llvm::zip(op->getOperands(), rule->operands))
      collect(currentOf(v), factors);

    // Operands must be laid out as the factors say: slice whole ones, refuse to gather split ones.
    for (auto [i, use] : llvm::enumerate(op->getOpOperands())) {
      Value v = use.get();
      Layout have = currentOf(v), want = have;
      for (auto [d, f] : llvm::enumerate(rule->operands[i]))
        want.dims[d] = f >= 0 ? factorAxes[f] : SmallVector<std::string>{};
      if (want.dims == have.dims)
        continue;
      for (size_t d = 0; d < want.dims.size(); ++d)
        if (!have.dims[d].empty() && want.dims[d] != have.dims[d])
          return op->emitError("operand ") << i << " is split along dim " << d << " where the op needs "
                                           << (want.dims[d].empty() ? std::string("it whole") : "another split")
                                           << " (resharding is not supported yet): " << describe(have) << " vs "
                                           << describe(want);
      if (!have.partial.empty())
        return op->emitError("cannot slice a partial sum");
      use.set(sliced(v, want, op));
    }

    // Results: local types and partial sums. A result is a partial sum over a split factor that
    // its operands have and it lacks (matmul K, the batch of a weight or norm-scale gradient), or
    // over the partial axes of a partial operand passed through.
    SmallVector<std::string> passedPartial;
    for (auto [i, use] : llvm::enumerate(op->getOpOperands()))
      if (partialIn[i])
        passedPartial = currentOf(use.get()).partial;
    SmallVector<Attribute> recorded;
    bool anySharded = false;
    for (auto [r, factors] : llvm::zip(op->getResults(), rule->results)) {
      Layout l;
      l.dims.resize(tensorType(r).getRank());
      for (auto [d, f] : llvm::enumerate(factors))
        if (f >= 0 && tensorType(r).getDimSize(d) % parts(factorAxes[f]) == 0)
          l.dims[d] = factorAxes[f];
      l.partial = passedPartial;
      for (int64_t f = 0; f < rule->numFactors(); ++f) {
        bool inOperands = llvm::any_of(rule->operands, [&](const auto &dims) { return llvm::is_contained(dims, f); });
        if (inOperands && !llvm::is_contained(factors, f) && !factorAxes[f].empty())
          l.partial = factorAxes[f];
      }
      if (failed(rewriteAttributes(op, l)))
        return failure();
      r.setType(localType(tensorType(r), l));
      current_[r] = l;
      recorded.push_back(toAttr(l));
      anySharded |= l.isSplit() || !l.partial.empty();
    }
    // The layout of the results, for --dump-sharding and the plan's metadata.
    if (anySharded)
      op->setAttr("cpc.shardings", b_.getArrayAttr(recorded));
    if (failed(fixReductionMeans(op)))
      return failure();
    // A partial sum that some user will need whole is reduced right where it is produced: the
    // gradient all-reduces then go out in the order backward produces them, not all at the end.
    for (Value r : op->getResults())
      reduceEagerly(r);
    return success();
  }

  void reduceEagerly(Value v) {
    if (!currentOf(v).partial.empty() && llvm::any_of(v.getUses(), [](OpOperand &use) { return needsWhole(use); }))
      reduced(v, v.getDefiningOp()->getNextNode());
  }

  static bool isAccumulator(StringRef name) { return name.starts_with("grad_acc."); }

  /// Whether the user of `use` certainly needs the value whole (not a partial sum).
  static bool needsWhole(OpOperand &use) {
    Operation *user = use.getOwner();
    if (llvm::isa<func::ReturnOp, AssignOp>(user))
      return true;
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
        limits[d] /= parts(result.dims[d]);
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
      split *= parts(in.dims[a]);
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

  ModuleOp module_;
  int64_t size_;
  OpBuilder b_;
  llvm::DenseMap<Value, Layout> layouts_; // propagated (global) layouts
  llvm::DenseMap<Value, Layout> current_; // layouts of the partitioned values
  llvm::DenseMap<Value, Value> allReduced_;
  llvm::DenseMap<Operation *, std::optional<ShardingRule>> rules_;
};

struct CpcDataParallelPass : cpc::impl::CpcDataParallelBase<CpcDataParallelPass> {
  using CpcDataParallelBase::CpcDataParallelBase;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (size < 1) {
      module.emitError("data-parallel size must be >= 1");
      return signalPassFailure();
    }
    OpBuilder b(module.getContext());
    b.setInsertionPointToStart(module.getBody());
    if (!module.lookupSymbol("mesh"))
      b.create<MeshOp>(module.getLoc(), b.getStringAttr("mesh"), b.getDenseI64ArrayAttr({size}),
                       b.getStrArrayAttr({"dp"}));
    for (const std::string &name : funcs) {
      auto func = module.lookupSymbol<func::FuncOp>(name);
      if (!func) {
        module.emitError("no function @") << name;
        return signalPassFailure();
      }
      if (failed(Partitioner(module, size).run(func)))
        return signalPassFailure();
    }
  }
};

} // namespace
