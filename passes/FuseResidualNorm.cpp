//===- FuseResidualNorm.cpp - residual add + LayerNorm, and their gradients -===//
//
// A transformer block adds its residual and normalizes the sum (x + attn(ln1(x)) -> ln2), and
// its backward adds the residual stream's gradient to each LayerNorm's input gradient. Run
// separately, each writes a tensor that the next kernel reads straight back; fused, the row is
// summed and normalized (or its gradient finished) while in cache:
//   layer_norm(add(a, b))          -> cpc.add_layer_norm(a, b) (sum, result)
//   add(layer_norm_grad(..)#0, r)  -> cpc.layer_norm_grad_add(.., r)
// Late, on per-rank IR (with cpc-fuse-epilogues): the fused ops have kernels, not sharding
// rules or VJPs. f32/f64 only (the fused kernels round as the separate ones there).
//
#include "passes/PatternUtils.h"
#include "passes/Passes.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/IR/Dominance.h"

namespace cpc {
#define GEN_PASS_DEF_CPCFUSERESIDUALNORM
#include "passes/Passes.h.inc"
} // namespace cpc

using namespace mlir;
using namespace cpc;

namespace {

bool fusible(Type t) {
  Type e = llvm::cast<RankedTensorType>(t).getElementType();
  return e.isF32() || e.isF64();
}

/// layer_norm(add(a, b)) with a, b and the sum of one f32/f64 type, where nothing reads the sum
/// before the LayerNorm: one cpc.add_layer_norm at the LayerNorm (the sum's later readers read
/// its `sum`).
struct FuseAddLayerNorm : OpRewritePattern<LayerNormOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(LayerNormOp norm, PatternRewriter &b) const override {
    auto add = norm.getInput().getDefiningOp<AddOp>();
    Type t = norm.getType();
    if (!add || add->getBlock() != norm->getBlock() || add.getLhs().getType() != t || add.getRhs().getType() != t ||
        add.getType() != t || !fusible(t))
      return failure();
    for (Operation *user : add->getUsers())
      if (user != norm && (user->getBlock() != norm->getBlock() || user->isBeforeInBlock(norm)))
        return failure();
    auto fused = b.create<AddLayerNormOp>(norm.getLoc(), TypeRange{t, t}, add.getLhs(), add.getRhs(), norm.getScale(),
                                          norm.getBias(), norm.getAxisAttr(), norm.getEpsilonAttr());
    b.replaceOp(norm, fused.getResult());
    b.replaceOp(add, fused.getSum());
    return success();
  }
};

/// add(layer_norm_grad(x, s, g)#0, r) (either order) where the input gradient has no other
/// reader and r is available at the layer_norm_grad: one cpc.layer_norm_grad_add there.
struct FuseLayerNormGradAdd : OpRewritePattern<AddOp> {
  FuseLayerNormGradAdd(MLIRContext *context, DominanceInfo &dominance)
      : OpRewritePattern(context), dominance(dominance) {}

  LogicalResult matchAndRewrite(AddOp add, PatternRewriter &b) const override {
    Type t = add.getType();
    if (add.getLhs().getType() != t || add.getRhs().getType() != t || !fusible(t))
      return failure();
    for (auto [grad, addend] : {std::pair{add.getLhs(), add.getRhs()}, std::pair{add.getRhs(), add.getLhs()}}) {
      auto norm = grad.getDefiningOp<LayerNormGradOp>();
      if (!norm || grad != norm.getInputGrad() || !grad.hasOneUse() || addend == grad ||
          !dominance.properlyDominates(addend, norm))
        continue;
      b.setInsertionPoint(norm);
      auto fused = b.create<LayerNormGradAddOp>(norm.getLoc(), norm->getResultTypes(), norm.getInput(),
                                                norm.getScale(), norm.getGrad(), addend, norm.getAxisAttr(),
                                                norm.getEpsilonAttr());
      b.replaceOp(add, fused.getInputGrad());
      b.replaceOp(norm, ValueRange{fused.getInputGrad(), fused.getScaleGrad(), fused.getBiasGrad()});
      return success();
    }
    return failure();
  }

  DominanceInfo &dominance;
};

struct CpcFuseResidualNormPass : cpc::impl::CpcFuseResidualNormBase<CpcFuseResidualNormPass> {
  void runOnOperation() override {
    SmallVector<Operation *> candidates;
    getOperation()->walk([&](Operation *op) {
      if (llvm::isa<LayerNormOp, AddOp>(op))
        candidates.push_back(op);
    });
    RewritePatternSet patterns(&getContext());
    patterns.add<FuseAddLayerNorm>(&getContext());
    patterns.add<FuseLayerNormGradAdd>(&getContext(), getAnalysis<DominanceInfo>());
    if (failed(rewriteOnly(candidates, std::move(patterns))))
      return signalPassFailure();
  }
};

} // namespace
