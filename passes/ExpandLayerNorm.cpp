//===- ExpandLayerNorm.cpp - cpc.layer_norm as its statistics -------------===//
//
// 2D and 2.5D tensor parallelism split the normalized (hidden) dim of every activation over the
// column axis. A fused layer_norm needs its rows whole; written as its two statistics instead,
// mean = reduce_mean(x) and var = reduce_mean((x - mean)^2), each is a partial sum over the
// columns that partitioning all-reduces (Optimus's LayerNorm: 2 all-reduces forward, and their
// gradients' sums backward), and the rest is elementwise on the blocks. Runs before autodiff,
// so the gradients come from the ops' own rules.
//
#include "passes/PatternUtils.h"
#include "passes/Passes.h"

#include "mlir/IR/PatternMatch.h"

#include <numeric>

namespace cpc {
#define GEN_PASS_DEF_CPCEXPANDLAYERNORM
#include "passes/Passes.h.inc"
} // namespace cpc

using namespace mlir;
using namespace cpc;

namespace {

struct ExpandLayerNormPattern : OpRewritePattern<LayerNormOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(LayerNormOp op, PatternRewriter &b) const override {
    Location loc = op.getLoc();
    auto type = llvm::cast<RankedTensorType>(op.getInput().getType());
    SmallVector<int64_t> axes(type.getRank() - op.getAxis());
    std::iota(axes.begin(), axes.end(), op.getAxis());
    auto mean = [&](Value v) {
      return b.create<ReduceMeanOp>(loc, v, b.getDenseI64ArrayAttr(axes), b.getBoolAttr(true)).getResult();
    };
    Value centered = b.create<SubOp>(loc, op.getInput(), mean(op.getInput()));
    Value variance = mean(b.create<MulOp>(loc, centered, centered));
    Type et = type.getElementType();
    Value epsilon = b.create<ConstantOp>(
        loc, DenseElementsAttr::get(RankedTensorType::get({}, et), b.getFloatAttr(et, op.getEpsilon().convertToDouble())));
    Value inverse = b.create<RsqrtOp>(loc, b.create<AddOp>(loc, variance, epsilon));
    Value normalized = b.create<MulOp>(loc, centered, inverse);
    Value scaled = b.create<MulOp>(loc, normalized, op.getScale());
    b.replaceOpWithNewOp<AddOp>(op, scaled, op.getBias());
    return success();
  }
};

struct CpcExpandLayerNormPass : cpc::impl::CpcExpandLayerNormBase<CpcExpandLayerNormPass> {
  using CpcExpandLayerNormBase::CpcExpandLayerNormBase;
  void runOnOperation() override {
    SmallVector<Operation *> norms;
    getOperation().walk([&](LayerNormOp op) { norms.push_back(op); });
    RewritePatternSet patterns(&getContext());
    patterns.add<ExpandLayerNormPattern>(&getContext());
    if (failed(rewriteOnly(norms, std::move(patterns))))
      return signalPassFailure();
  }
};

} // namespace
