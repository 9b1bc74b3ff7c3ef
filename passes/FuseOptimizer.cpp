//===- FuseOptimizer.cpp - the gradient norm's squares and the clip's scale -===//
//
// The update of a step reads every gradient three times around the norm: g * g (written), its
// sum, then g * coef (written again) for AdamW. On per-rank IR, right before the plan:
//   - reduce_sum(x * x), the square read by nothing else, becomes cpc.reduce_sum_squares(x);
//   - adamw(p, g * s, ...) with s rank 0 and the product read by nothing else takes s as its
//     grad_scale operand.
// Both keep the roundings of the ops they replace: the CPU kernels give the same bits.
//
#include "passes/Passes.h"

#include "mlir/IR/Builders.h"

namespace cpc {
#define GEN_PASS_DEF_CPCFUSEOPTIMIZER
#include "passes/Passes.h.inc"
} // namespace cpc

using namespace mlir;
using namespace cpc;

namespace {

bool isScalar(Value v) { return llvm::cast<RankedTensorType>(v.getType()).getRank() == 0; }

void fuseSquares(ReduceSumOp sum) {
  auto square = sum.getInput().getDefiningOp<MulOp>();
  if (!square || square.getLhs() != square.getRhs() || !square->hasOneUse() ||
      square.getLhs().getType() != square.getType() || !llvm::isa<FloatType>(square.getType().getElementType()))
    return; // (integer sums of squares keep their ops: the fused op is for floats)
  OpBuilder b(sum);
  auto fused = b.create<ReduceSumSquaresOp>(sum.getLoc(), sum.getType(), square.getLhs(), sum.getAxesAttr(),
                                            sum.getKeepdimsAttr());
  fused->setDiscardableAttrs(sum->getDiscardableAttrDictionary());
  sum.getResult().replaceAllUsesWith(fused.getResult());
  sum->erase();
  square->erase();
}

void fuseGradScale(AdamWOp adam) {
  auto product = adam.getGrad().getDefiningOp<MulOp>();
  if (adam.getGradScale() || !product || !product->hasOneUse() || product.getType() != adam.getGrad().getType())
    return;
  Value grad = product.getLhs(), scale = product.getRhs();
  if (!isScalar(scale))
    std::swap(grad, scale);
  if (!isScalar(scale) || grad.getType() != product.getType())
    return;
  adam.getGradMutable().assign(grad);
  adam.getGradScaleMutable().assign(scale);
  product->erase();
}

struct CpcFuseOptimizerPass : cpc::impl::CpcFuseOptimizerBase<CpcFuseOptimizerPass> {
  void runOnOperation() override {
    SmallVector<ReduceSumOp> sums;
    SmallVector<AdamWOp> updates;
    getOperation()->walk([&](Operation *op) {
      if (auto sum = llvm::dyn_cast<ReduceSumOp>(op))
        sums.push_back(sum);
      else if (auto adam = llvm::dyn_cast<AdamWOp>(op))
        updates.push_back(adam);
    });
    for (ReduceSumOp sum : sums)
      fuseSquares(sum);
    for (AdamWOp adam : updates)
      fuseGradScale(adam);
  }
};

} // namespace
