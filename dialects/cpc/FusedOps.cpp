//===- FusedOps.cpp - ops that late passes write for kernels that fuse work ===//
#include "dialects/cpc/CpcDialect.h"

using namespace mlir;

namespace cpc {

LogicalResult MatMulBiasOp::verify() {
  auto result = llvm::cast<RankedTensorType>(getResult().getType());
  auto bias = llvm::cast<RankedTensorType>(getBias().getType());
  auto lhs = llvm::cast<RankedTensorType>(getLhs().getType());
  auto rhs = llvm::cast<RankedTensorType>(getRhs().getType());
  if (lhs.getRank() < 2 || rhs.getRank() != 2)
    return emitOpError("needs an lhs of rank >= 2 and a rank-2 rhs (a Linear's weight)");
  if (lhs.getElementType() != result.getElementType() || rhs.getElementType() != result.getElementType() ||
      bias.getElementType() != result.getElementType())
    return emitOpError("operands and result must have one element type");
  int64_t k = getTransposeLhs() ? lhs.getDimSize(lhs.getRank() - 2) : lhs.getDimSize(lhs.getRank() - 1);
  int64_t rhsK = getTransposeRhs() ? rhs.getDimSize(1) : rhs.getDimSize(0);
  int64_t n = getTransposeRhs() ? rhs.getDimSize(0) : rhs.getDimSize(1);
  int64_t m = getTransposeLhs() ? lhs.getDimSize(lhs.getRank() - 1) : lhs.getDimSize(lhs.getRank() - 2);
  SmallVector<int64_t> shape(lhs.getShape().drop_back(2));
  shape.append({m, n});
  if (k != rhsK)
    return emitOpError("contracting dims differ");
  if (result.getShape() != ArrayRef<int64_t>(shape))
    return emitOpError("result shape does not match the operands'");
  if (bias.getRank() != 1 || bias.getDimSize(0) != n)
    return emitOpError("bias must have one element per column (") << n << ")";
  if (getActivation() != "none" && getActivation() != "gelu")
    return emitOpError("activation must be \"none\" or \"gelu\"");
  if (getApproximate() != "none" && getApproximate() != "tanh")
    return emitOpError("approximate must be \"none\" or \"tanh\"");
  if (getPreactivation().size() > 1 || (!getPreactivation().empty() && getActivation() != "gelu"))
    return emitOpError("has a preactivation result only with activation \"gelu\" (at most one)");
  if (!getPreactivation().empty() && getPreactivation()[0].getType() != result)
    return emitOpError("preactivation must have the result's type");
  return success();
}

} // namespace cpc
