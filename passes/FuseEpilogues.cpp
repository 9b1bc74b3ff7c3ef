//===- FuseEpilogues.cpp - matmul + bias (+ GELU) -> cpc.matmul_bias -------===//
#include "passes/PatternUtils.h"
#include "passes/Passes.h"

#include "mlir/IR/PatternMatch.h"

namespace cpc {
#define GEN_PASS_DEF_CPCFUSEEPILOGUES
#include "passes/Passes.h.inc"
} // namespace cpc

using namespace mlir;
using namespace cpc;

namespace {

/// The bias of `add` when it adds a rank-1 vector of `product`'s element type along
/// `product`'s last dim (either operand order), else null.
Value biasOf(AddOp add, Value product) {
  Value other = add.getLhs() == product ? add.getRhs() : add.getLhs();
  if (other == product)
    return {};
  auto productType = llvm::cast<RankedTensorType>(product.getType());
  auto biasType = llvm::dyn_cast<RankedTensorType>(other.getType());
  if (!biasType || biasType.getRank() != 1 || biasType.getElementType() != productType.getElementType() ||
      biasType.getDimSize(0) != productType.getShape().back() || add.getType() != productType)
    return {};
  return other;
}

/// Rewrites `matmul` -> add(bias) [-> gelu] into one cpc.matmul_bias.
struct FuseMatMulEpilogue : OpRewritePattern<MatMulOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(MatMulOp matmul, PatternRewriter &b) const override {
    auto lhsType = llvm::cast<RankedTensorType>(matmul.getLhs().getType());
    auto rhsType = llvm::cast<RankedTensorType>(matmul.getRhs().getType());
    Value product = matmul.getResult();
    if (lhsType.getRank() < 2 || rhsType.getRank() != 2 || !product.hasOneUse())
      return failure();
    auto add = llvm::dyn_cast<AddOp>(*product.getUsers().begin());
    if (!add || add->getBlock() != matmul->getBlock())
      return failure();
    Value bias = biasOf(add, product);
    if (!bias)
      return failure();
    Value sum = add.getResult();
    GeluOp gelu;
    for (Operation *user : sum.getUsers())
      if (auto g = llvm::dyn_cast<GeluOp>(user); g && g->getBlock() == add->getBlock()) {
        gelu = g;
        break;
      }
    // At the add: its operands and the matmul's dominate it, and it dominates every use of the
    // sum and of the GELU.
    b.setInsertionPoint(add);
    bool keepSum = gelu && !sum.hasOneUse();
    SmallVector<Type> results{sum.getType()};
    if (keepSum)
      results.push_back(sum.getType());
    auto fused = b.create<MatMulBiasOp>(add.getLoc(), results, matmul.getLhs(), matmul.getRhs(), bias,
                                        matmul.getTransposeLhs(), matmul.getTransposeRhs(),
                                        gelu ? FusedActivation::Gelu : FusedActivation::None,
                                        gelu ? gelu.getApproximate() : GeluApproximation::None);
    fused->setDiscardableAttrs(matmul->getDiscardableAttrDictionary());
    if (gelu) {
      b.replaceOp(gelu, fused.getResult());
      if (keepSum)
        b.replaceOp(add, fused.getPreactivation()[0]);
      else
        b.eraseOp(add);
    } else {
      b.replaceOp(add, fused.getResult());
    }
    b.eraseOp(matmul);
    return success();
  }
};

struct CpcFuseEpiloguesPass : cpc::impl::CpcFuseEpiloguesBase<CpcFuseEpiloguesPass> {
  void runOnOperation() override {
    SmallVector<Operation *> matmuls;
    getOperation()->walk([&](MatMulOp op) { matmuls.push_back(op); });
    RewritePatternSet patterns(&getContext());
    patterns.add<FuseMatMulEpilogue>(&getContext());
    if (failed(rewriteOnly(matmuls, std::move(patterns))))
      return signalPassFailure();
  }
};

} // namespace
