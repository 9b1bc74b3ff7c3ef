//===- Zero.cpp - ZeRO placement of the optimizer over the dp axis --------===//
#include "dialects/cpc/Roles.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ADT/StringMap.h"

namespace cpc {
#define GEN_PASS_DEF_CPCZERO
#include "passes/Passes.h.inc"
} // namespace cpc

using namespace mlir;
using namespace cpc;

namespace {

struct CpcZeroPass : cpc::impl::CpcZeroBase<CpcZeroPass> {
  using CpcZeroBase::CpcZeroBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto mesh = module.lookupSymbol<MeshOp>("mesh");
    if (!mesh || mesh.getAxisSize("dp") < 1) {
      module.emitError("cpc-zero needs the dp mesh of cpc-data-parallel");
      return signalPassFailure();
    }
    if (stage < 1 || stage > 3) {
      module.emitError("ZeRO stage ") << stage << " does not exist (stages 1, 2 and 3 do)";
      return signalPassFailure();
    }
    int64_t ranks = mesh.getAxisSize("dp");
    llvm::StringMap<RankedTensorType> shardedParams; // ZeRO-3: name -> global type
    FailureOr<SmallVector<func::FuncOp>> targets = functionsOrPhases(module, funcs, {Phase::TrainStep, Phase::Apply});
    if (failed(targets))
      return signalPassFailure();
    for (func::FuncOp func : *targets) {
      SmallVector<AdamWOp> updates;
      func.walk([&](AdamWOp op) { updates.push_back(op); });
      SmallVector<Value> shardedNormTerms;
      for (AdamWOp op : updates) {
        Value original = op.getGrad();
        Value grad = stage >= 2 ? scatterGradient(op, ranks, shardedNormTerms) : original;
        if (failed(shardUpdate(op, ranks, /*gradIsShard=*/grad != original, stage == 3 ? &shardedParams : nullptr)))
          return signalPassFailure();
      }
      if (!shardedNormTerms.empty() && failed(completeNorm(shardedNormTerms, ranks)))
        return signalPassFailure();
    }
    if (stage == 3)
      gatherBeforeUse(module, shardedParams, ranks);
  }

  /// Marks a value placed as per-rank blocks for --dump-sharding (the layout of its flat view).
  void recordPlacement(Operation *op) {
    op->setAttr("cpc.shardings", ArrayAttr::get(op->getContext(), {blockSharding(op->getContext())}));
  }

  ShardingAttr blockSharding(MLIRContext *ctx) {
    Builder b(ctx);
    return ShardingAttr::get(ctx, FlatSymbolRefAttr::get(ctx, "mesh"), b.getArrayAttr({b.getStrArrayAttr({"dp"})}),
                             ArrayAttr());
  }

  /// This rank's block of parameter `name` (ZeRO-3 storage), created before `before`.
  ParameterOp shardedParameter(OpBuilder &b, Location loc, StringAttr name, RankedTensorType global, int64_t ranks,
                               bool trainable) {
    auto block = RankedTensorType::get({global.getNumElements() / ranks}, global.getElementType());
    auto param = b.create<ParameterOp>(loc, block, name, trainable ? b.getUnitAttr() : UnitAttr(),
                                       b.getDenseI64ArrayAttr(global.getShape()), blockSharding(b.getContext()),
                                       DenseI64ArrayAttr(), DenseI64ArrayAttr());
    recordPlacement(param);
    return param;
  }

  /// The whole value of a ZeRO-3 parameter, gathered right before `user`.
  Value gathered(OpBuilder &b, Location loc, Value block, RankedTensorType global) {
    auto flat = RankedTensorType::get({global.getNumElements()}, global.getElementType());
    MLIRContext *ctx = b.getContext();
    Value whole = b.create<AllGatherOp>(loc, flat, block, FlatSymbolRefAttr::get(ctx, "mesh"), b.getStrArrayAttr({"dp"}));
    return b.create<ReshapeOp>(loc, global, whole);
  }

  /// ZeRO-3: every remaining read of a sharded parameter becomes a read of this rank's block
  /// and an all-gather right before each op that uses it. The whole value is an arena temporary
  /// that lives only until that op, so it is freed after each use and gathered again for the
  /// next (forward and backward gather separately: 1.5x the traffic of data parallelism).
  void gatherBeforeUse(ModuleOp module, const llvm::StringMap<RankedTensorType> &sharded, int64_t ranks) {
    SmallVector<ParameterOp> reads;
    module.walk([&](ParameterOp op) {
      if (!op.getShardingAttr() && sharded.count(op.getName()))
        reads.push_back(op);
    });
    for (ParameterOp op : reads) {
      RankedTensorType global = sharded.lookup(op.getName());
      OpBuilder b(op);
      ParameterOp block = shardedParameter(b, op.getLoc(), op.getNameAttr(), global, ranks, op.getTrainable());
      SmallVector<Operation *> users;
      for (Operation *user : op->getUsers())
        if (!llvm::is_contained(users, user))
          users.push_back(user);
      for (Operation *user : users) {
        b.setInsertionPoint(user);
        Value whole = gathered(b, user->getLoc(), block, global);
        user->replaceUsesOfWith(op, whole);
      }
      op.erase();
      if (block->use_empty())
        block.erase();
    }
  }

  /// ZeRO-2: the gradient of `op` arrives as all_reduce(x), possibly scaled by the clip factor,
  /// and its squared norm as reduce_sum(all_reduce(x)^2). Replace the all-reduce by a
  /// reduce-scatter of the flattened x: the update gets this rank's block of the sum, the norm
  /// term becomes this rank's share (summed over ranks in completeNorm). Returns the gradient
  /// block, or op's gradient unchanged when the pattern does not hold (ZeRO-1 then applies).
  Value scatterGradient(AdamWOp op, int64_t ranks, SmallVectorImpl<Value> &normTerms) {
    Value grad = op.getGrad();
    int64_t n = op.getParam().getType().getNumElements();
    if (n == 0 || n % ranks)
      return grad;
    Value reducedGrad = grad, scale;
    if (auto mul = grad.getDefiningOp<MulOp>()) { // clipping: g * coef
      auto rank0 = [](Value v) { return llvm::cast<RankedTensorType>(v.getType()).getRank() == 0; };
      if (rank0(mul.getRhs()))
        reducedGrad = mul.getLhs(), scale = mul.getRhs();
      else if (rank0(mul.getLhs()))
        reducedGrad = mul.getRhs(), scale = mul.getLhs();
    }
    auto ar = reducedGrad.getDefiningOp<AllReduceOp>();
    if (!ar || ar.getInputs().size() != 1)
      return grad;
    // Every other use must be the norm term reduce_sum(g * g).
    SmallVector<std::pair<MulOp, ReduceSumOp>> squares;
    llvm::SmallPtrSet<Operation *, 4> seen; // g * g lists its user twice
    for (Operation *user : reducedGrad.getUsers()) {
      if (!seen.insert(user).second)
        continue;
      if (user == op || (scale && user == grad.getDefiningOp()))
        continue;
      auto sq = llvm::dyn_cast<MulOp>(user);
      if (!sq || sq.getLhs() != reducedGrad || sq.getRhs() != reducedGrad || !sq->hasOneUse())
        return grad;
      auto sum = llvm::dyn_cast<ReduceSumOp>(*sq->user_begin());
      if (!sum || sum.getType().getRank() != 0)
        return grad;
      squares.push_back({sq, sum});
    }
    if (squares.size() != 1 || (scale && !grad.hasOneUse()))
      return grad;
    OpBuilder b(ar);
    b.setInsertionPointAfter(ar);
    Location loc = ar.getLoc();
    MLIRContext *ctx = op.getContext();
    auto type = llvm::cast<RankedTensorType>(reducedGrad.getType());
    auto flat = RankedTensorType::get({n}, type.getElementType());
    auto block = RankedTensorType::get({n / ranks}, type.getElementType());
    Value x = b.create<ReshapeOp>(loc, flat, ar.getInputs().front());
    Value shard = b.create<ReduceScatterOp>(loc, block, x, FlatSymbolRefAttr::get(ctx, "mesh"),
                                            b.getStrArrayAttr({"dp"}));
    // The norm term from the block: a share of the sum of squares.
    auto [sq, sum] = squares.front();
    b.setInsertionPoint(sum);
    Value sqShard = b.create<MulOp>(sq.getLoc(), shard, shard);
    Value share = b.create<ReduceSumOp>(sum.getLoc(), sqShard, b.getDenseI64ArrayAttr({0}), b.getBoolAttr(false));
    sum.getResult().replaceAllUsesWith(share);
    normTerms.push_back(share);
    sum.erase();
    sq.erase();
    Value result = shard;
    if (scale) {
      auto mul = grad.getDefiningOp<MulOp>();
      b.setInsertionPoint(mul);
      result = b.create<MulOp>(mul.getLoc(), shard, scale);
      op.getGradMutable().assign(result);
      mul.erase();
    } else {
      op.getGradMutable().assign(result);
    }
    if (ar->use_empty())
      ar.erase();
    return result;
  }

  /// The squared gradient norm is a sum of terms; after ZeRO-2 some are this rank's shares. Scale
  /// the whole terms by 1/N (every rank holds them) and all-reduce the total before the sqrt.
  LogicalResult completeNorm(ArrayRef<Value> shares, int64_t ranks) {
    // Walk from a share through the adds (and a cast) to the sqrt.
    Operation *cursor = *shares.front().getUsers().begin();
    while (cursor && llvm::isa<AddOp, CastOp>(cursor))
      cursor = cursor->hasOneUse() ? *cursor->getUsers().begin() : nullptr;
    auto sqrt = llvm::dyn_cast_or_null<SqrtOp>(cursor);
    if (!sqrt)
      return shares.front().getDefiningOp()->emitError("ZeRO-2 cannot find the gradient norm of this term");
    llvm::SmallPtrSet<Value, 32> shareSet(shares.begin(), shares.end());
    // Leaves of the add tree under the sqrt.
    SmallVector<Value> stack{sqrt.getInput()};
    SmallVector<OpOperand *> wholeLeaves;
    while (!stack.empty()) {
      Value v = stack.pop_back_val();
      Operation *def = v.getDefiningOp();
      if (auto add = llvm::dyn_cast_or_null<AddOp>(def)) {
        for (OpOperand &operand : add->getOpOperands()) {
          Value o = operand.get();
          if (llvm::isa_and_nonnull<AddOp>(o.getDefiningOp()))
            stack.push_back(o);
          else if (!shareSet.contains(o))
            wholeLeaves.push_back(&operand);
        }
      }
    }
    OpBuilder b(sqrt);
    for (OpOperand *leaf : wholeLeaves) {
      b.setInsertionPoint(leaf->getOwner());
      Type et = llvm::cast<RankedTensorType>(leaf->get().getType()).getElementType();
      Value inv = b.create<ConstantOp>(leaf->getOwner()->getLoc(),
                                       DenseElementsAttr::get(RankedTensorType::get({}, et), b.getFloatAttr(et, 1.0 / ranks)));
      leaf->set(b.create<MulOp>(leaf->getOwner()->getLoc(), leaf->get(), inv));
    }
    b.setInsertionPoint(sqrt);
    Value total = b.create<AllReduceOp>(sqrt.getLoc(), ValueRange{sqrt.getInput()},
                                        FlatSymbolRefAttr::get(sqrt.getContext(), "mesh"), b.getStrArrayAttr({"dp"}))
                      .getResult(0);
    sqrt.getInputMutable().assign(total);
    return success();
  }

  /// adamw(p, g, m, v) -> all_gather(adamw(p[r], g[r], m_r, v_r)): rank r keeps and updates block r
  /// of the flattened parameter; its moments are states of that block's size. ZeRO-3
  /// (`sharded` set): the parameter itself is stored as blocks, so the update reads and assigns
  /// this rank's block and nothing is gathered here (readers gather, see gatherBeforeUse).
  LogicalResult shardUpdate(AdamWOp op, int64_t ranks, bool gradIsShard,
                            llvm::StringMap<RankedTensorType> *sharded) {
    auto type = op.getParam().getType();
    int64_t n = type.getNumElements();
    if (n == 0 || n % ranks)
      return success(); // empty or odd-sized: keep this parameter's optimizer whole
    auto m = op.getExpAvg().getDefiningOp<StateOp>(), v = op.getExpAvgSq().getDefiningOp<StateOp>();
    if (!m || !v)
      return op.emitError("ZeRO expects the moments to be states");
    auto param = op.getParam().getDefiningOp<ParameterOp>();
    if (sharded && !param)
      sharded = nullptr; // not a stored parameter: ZeRO-1/2 placement for this update
    OpBuilder b(op);
    Location loc = op.getLoc();
    MLIRContext *ctx = op.getContext();
    auto flat = RankedTensorType::get({n}, type.getElementType());
    auto shard = RankedTensorType::get({n / ranks}, type.getElementType());
    auto slice = [&](Value v) {
      Value f = b.create<ReshapeOp>(loc, flat, v);
      return b.create<ShardSliceOp>(loc, shard, f, blockSharding(ctx)).getResult();
    };
    Value p = sharded ? shardedParameter(b, loc, param.getNameAttr(), type, ranks, param.getTrainable()).getResult()
                      : slice(op.getParam());
    Value g = gradIsShard ? op.getGrad() : slice(op.getGrad());
    // The moments become shard-sized states (the plan sizes their buffers from these types).
    b.setInsertionPoint(m);
    auto mShard = b.create<StateOp>(m.getLoc(), shard, m.getRoleAttr(), m.getNameAttr());
    b.setInsertionPoint(v);
    auto vShard = b.create<StateOp>(v.getLoc(), shard, v.getRoleAttr(), v.getNameAttr());
    recordPlacement(mShard);
    recordPlacement(vShard);
    b.setInsertionPoint(op);
    auto update = b.create<AdamWOp>(loc, p, g, mShard, vShard, op.getLr(), op.getStep(), op.getBeta1Attr(),
                                    op.getBeta2Attr(), op.getEpsilonAttr(), op.getWeightDecayAttr());
    Value newParam;
    auto wholeNewParam = [&] {
      if (!newParam) {
        b.setInsertionPointAfter(update);
        newParam = gathered(b, loc, update.getNewParam(), type);
      }
      return newParam;
    };
    for (OpOperand &use : llvm::make_early_inc_range(op.getNewParam().getUses())) {
      auto assign = llvm::dyn_cast<AssignOp>(use.getOwner());
      if (sharded && assign && assign.getName() == param.getName())
        use.set(update.getNewParam()); // the stored block is written back as a block
      else
        use.set(wholeNewParam());
    }
    if (sharded)
      (*sharded)[param.getName()] = type;
    op.getNewExpAvg().replaceAllUsesWith(update.getNewExpAvg());
    op.getNewExpAvgSq().replaceAllUsesWith(update.getNewExpAvgSq());
    op.erase();
    if (m->use_empty())
      m.erase();
    if (v->use_empty())
      v.erase();
    if (param && param->use_empty())
      param.erase();
    return success();
  }
};

} // namespace
