//===- Cost.cpp -----------------------------------------------------------===//
#include "dialects/cpc/Cost.h"
#include "dialects/cpc/CpcDialect.h"
#include "kernels/Tensor.h"

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

namespace {
int64_t dim(Value v, int64_t d) {
  auto t = llvm::cast<RankedTensorType>(v.getType());
  return t.getDimSize(d < 0 ? t.getRank() + d : d);
}

/// The GEMM of a matmul: lhs [..., M, K] (or [..., K, M] transposed) times rhs into `result`.
GemmDims matmulDims(Value lhs, bool transposeLhs, Value result) {
  auto l = llvm::cast<RankedTensorType>(lhs.getType());
  auto r = llvm::cast<RankedTensorType>(result.getType());
  int64_t k = l.getRank() == 1 ? l.getDimSize(0) : l.getDimSize(l.getRank() - (transposeLhs ? 2 : 1));
  int64_t m = l.getRank() == 1 ? 1 : l.getDimSize(l.getRank() - (transposeLhs ? 1 : 2));
  int64_t n = r.getRank() == 0 ? 1 : r.getDimSize(r.getRank() - 1);
  return {std::max<int64_t>(elements(result) / std::max<int64_t>(m * n, 1), 1), m, n, k};
}

/// A convolution as the implicit GEMM per group of its forward: M = batch x output pixels,
/// N = output channels, K = input channels x kernel area (its gradients do the same products).
GemmDims convDims(Value x, Value w, Value y, int64_t groups) {
  int64_t g = std::max<int64_t>(groups, 1), pixels = elements(y) / std::max<int64_t>(dim(y, 1), 1);
  int64_t perOutput = elements(w) / std::max<int64_t>(dim(w, 0), 1); // Cin/g x kh x kw
  return {g, pixels, dim(w, 0) / g, perOutput};
}
} // namespace

std::optional<GemmDims> gemmDims(Operation *op) {
  if (auto mm = llvm::dyn_cast<MatMulOp>(op))
    return matmulDims(mm.getLhs(), mm.getTransposeLhs(), mm.getResult());
  if (auto mm = llvm::dyn_cast<MatMulBiasOp>(op))
    return matmulDims(mm.getLhs(), mm.getTransposeLhs(), mm.getResult());
  if (auto conv = llvm::dyn_cast<Conv2DOp>(op))
    return convDims(conv.getInput(), conv.getWeight(), conv.getResult(), conv.getGroups());
  if (auto conv = llvm::dyn_cast<Conv2DGradInputOp>(op)) // dy [N, Cout, Ho, Wo]: the forward's output
    return convDims(conv.getResult(), conv.getWeight(), conv.getGrad(), conv.getGroups());
  if (auto conv = llvm::dyn_cast<Conv2DGradWeightOp>(op))
    return convDims(conv.getInput(), conv.getResult(), conv.getGrad(), conv.getGroups());
  return std::nullopt;
}

CostClass costClass(Operation *op) {
  if (llvm::isa<MatMulOp, MatMulBiasOp, Conv2DOp, Conv2DGradInputOp, Conv2DGradWeightOp>(op))
    return CostClass::Gemm;
  if (llvm::isa<AttentionOp, AttentionGradOp>(op))
    return CostClass::Attention;
  if (llvm::isa<AdamWOp, MultiTensorAdamWOp>(op))
    return CostClass::Optimizer;
  return CostClass::Memory;
}

int64_t estimateFlops(Operation *op) {
  if (std::optional<GemmDims> g = gemmDims(op)) // a matmul_bias's epilogue is one of its bytes' passes
    return g->flops();
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
  int64_t n = 0;
  for (Value r : op->getResults())
    n += elements(r);
  return n;
}

int64_t movedBytes(Operation *op) {
  if (llvm::isa<ReshapeOp>(op)) // a view of its input
    return 0;
  if (auto slice = llvm::dyn_cast<SliceOp>(op)) // reads its result's worth of the input
    return 2 * valueBytes(slice.getResult());
  int64_t bytes = 0;
  for (Value v : op->getOperands())
    bytes += valueBytes(v);
  for (Value v : op->getResults())
    bytes += valueBytes(v);
  return bytes;
}

double estimateSeconds(Operation *op, const CostProfile &profile) {
  if (llvm::isa<ReshapeOp>(op))
    return 0;
  if (std::optional<GemmDims> g = gemmDims(op))
    return profile.stepSeconds + profile.gemmSeconds(*g, (double)movedBytes(op), op->getName().getStringRef().str());
  return profile.stepSeconds + profile.computeSeconds(costClass(op), (double)estimateFlops(op), (double)movedBytes(op),
                                                      op->getName().getStringRef().str());
}

FailureOr<CostProfile> loadCostProfile(Operation *at, const std::string &path) {
  if (path.empty())
    return CostProfile::builtIn();
  try {
    return CostProfile::load(path);
  } catch (const RuntimeError &e) {
    return at->emitError(e.what()), failure();
  }
}

double estimateSeconds(Operation *op) {
  static const CostProfile builtIn = CostProfile::builtIn();
  return estimateSeconds(op, builtIn);
}

} // namespace cpc
