//===- Cost.cpp -----------------------------------------------------------===//
#include "dialects/cpc/Cost.h"
#include "dialects/cpc/CpcDialect.h"

using namespace mlir;

namespace cpc {

namespace {
int64_t elements(Value v) {
  auto t = llvm::dyn_cast<RankedTensorType>(v.getType());
  return t && t.hasStaticShape() ? t.getNumElements() : 0;
}
} // namespace

int64_t valueBytes(Value v) {
  auto t = llvm::dyn_cast<RankedTensorType>(v.getType());
  if (!t || !t.hasStaticShape())
    return 0;
  int64_t bits = t.getElementType().isIntOrFloat() ? t.getElementType().getIntOrFloatBitWidth() : 8;
  return t.getNumElements() * std::max<int64_t>(bits / 8, 1);
}

int64_t estimateFlops(Operation *op) {
  if (auto mm = llvm::dyn_cast<MatMulOp>(op)) {
    auto lhs = llvm::cast<RankedTensorType>(mm.getLhs().getType());
    int64_t k = lhs.getRank() == 1 ? lhs.getDimSize(0)
                                   : lhs.getDimSize(lhs.getRank() - (mm.getTransposeLhs() ? 2 : 1));
    return 2 * elements(mm.getResult()) * k;
  }
  // Attention: two products (scores, probabilities times v), its gradient four.
  if (llvm::isa<AttentionOp, AttentionGradOp>(op)) {
    auto q = llvm::cast<RankedTensorType>(op->getOperand(0).getType());
    auto k = llvm::cast<RankedTensorType>(op->getOperand(1).getType());
    auto v = llvm::cast<RankedTensorType>(op->getOperand(2).getType());
    bool tokenMajor = llvm::isa<AttentionOp>(op) ? llvm::cast<AttentionOp>(op).isTokenMajor()
                                                 : llvm::cast<AttentionGradOp>(op).isTokenMajor();
    int64_t rank = q.getRank(), d = q.getDimSize(rank - 1), dv = v.getDimSize(rank - 1);
    int64_t m = k.getDimSize(rank - (tokenMajor ? 3 : 2)); // keys: [..., M, D] or [..., M, H, D]
    int64_t rows = q.hasStaticShape() ? q.getNumElements() / std::max<int64_t>(d, 1) : 0; // batch x N
    int64_t products = llvm::isa<AttentionOp>(op) ? 2 * rows * m * (d + dv) : 4 * rows * m * (d + dv);
    return products + 4 * rows * m; // + the softmax (or its VJP) per score
  }
  // A convolution's output element sums Cin/groups x kh x kw products: the weight's elements
  // per output channel (operand 1; the gradients are counted alike, roughly).
  if (llvm::isa<Conv2DOp, Conv2DGradInputOp, Conv2DGradWeightOp>(op)) {
    auto w = llvm::cast<RankedTensorType>(op->getOperand(1).getType());
    int64_t perOutput = w.getRank() == 4 && w.getDimSize(0) > 0 ? w.getNumElements() / w.getDimSize(0) : 1;
    int64_t out = 0;
    for (Value r : op->getResults())
      out += elements(r);
    return 2 * out * perOutput;
  }
  int64_t n = 0;
  for (Value r : op->getResults())
    n += elements(r);
  return n;
}

double estimateSeconds(Operation *op) {
  if (llvm::isa<ReshapeOp>(op)) // a view of its input
    return 0;
  int64_t bytes = 0;
  for (Value v : op->getOperands())
    bytes += valueBytes(v);
  for (Value v : op->getResults())
    bytes += valueBytes(v);
  return std::max(estimateFlops(op) / kFlopsPerSecond, bytes / kBytesPerSecond);
}

} // namespace cpc
