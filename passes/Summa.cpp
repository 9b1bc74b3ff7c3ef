//===- Summa.cpp - the 2D (SUMMA) partitioning strategy of a matmul -------===//
//
// On a mesh with the 2D tensor-parallel axes (tp_row x tp_col, q x q), a matmul C = A B whose
// operands are both split over the two axes, one per matrix dim, is computed blockwise as
// SUMMA does: q steps, each broadcasting one block along a row or column of ranks (and, for
// the gradients, reducing one block to its owner), so that no rank ever holds a whole row of
// blocks. With sigma(T) the pair axis on the non-contracted dim of A (the rows L of C), or on
// the contracted dim K of B:
//   - sigma(A) == sigma(B): C stays where it is computed (the forward Linear): step t
//     broadcasts A's K-block t along A's K axis and B's K-block t along B's K axis;
//   - otherwise A and B have K on the same axis. Either A stays (the input gradient): step t
//     broadcasts B's N-block t and reduces the product to C's owner of N-block t; or B stays
//     (chosen when C's propagated layout puts its rows on B's K axis): step t broadcasts A's
//     L-block t and reduces the product to the owner of C's L-block t.
// Other mesh axes pass through: those on A's rows stay on C's rows (dp, tp_dep on the batch),
// those on K (equal in A and B) leave C a partial sum over them (2.5D's weight gradients over
// the depth).
//
#include "passes/Summa.h"

#include "mlir/IR/Builders.h"

using namespace mlir;

namespace cpc {

namespace {

RankedTensorType tensorType(Value v) { return llvm::cast<RankedTensorType>(v.getType()); }

/// The pair axes (tp_row, tp_col) among `axes`.
MeshAxes pairAxesIn(const MeshAxes &axes) {
  MeshAxes found;
  for (const std::string &a : axes)
    if (a == kTpRowAxis || a == kTpColAxis)
      found.push_back(a);
  return found;
}

MeshAxes otherAxesIn(const MeshAxes &axes) {
  MeshAxes found;
  for (const std::string &a : axes)
    if (a != kTpRowAxis && a != kTpColAxis)
      found.push_back(a);
  return found;
}

std::string otherPairAxis(StringRef axis) { return axis == kTpRowAxis ? kTpColAxis.str() : kTpRowAxis.str(); }

/// Where a matmul's factors sit in its operands: L (rows of C: batch dims and M) in A and C, K in
/// A and B, N in B and C. B is a matrix (rank 2).
struct MatMulDims {
  int64_t lk, lm, rk, rn, rank; // rank: of A and C
  /// The dim of C holding A's dim `d` (not K).
  int64_t resultDimOfLhs(int64_t d) const { return d == lm ? rank - 2 : d; }
};

std::optional<MatMulDims> matMulDims(MatMulOp op) {
  auto a = tensorType(op.getLhs()), b = tensorType(op.getRhs());
  if (a.getRank() < 2 || b.getRank() != 2 || tensorType(op.getResult()).getRank() != a.getRank())
    return std::nullopt;
  int64_t r = a.getRank();
  MatMulDims d;
  d.rank = r;
  d.lm = op.getTransposeLhs() ? r - 1 : r - 2;
  d.lk = op.getTransposeLhs() ? r - 2 : r - 1;
  d.rk = op.getTransposeRhs() ? 1 : 0;
  d.rn = 1 - d.rk;
  return d;
}

/// The one pair axis on the rows of `l` (the dims of A or C other than `skip`), and its dim.
std::optional<std::pair<std::string, int64_t>> rowPairAxis(const Layout &l, int64_t skip) {
  std::optional<std::pair<std::string, int64_t>> found;
  for (int64_t d = 0; d < (int64_t)l.dims.size(); ++d) {
    if (d == skip)
      continue;
    MeshAxes pair = pairAxesIn(l.dims[d]);
    if (pair.empty())
      continue;
    if (found || pair.size() > 1)
      return std::nullopt;
    found = std::make_pair(pair.front(), d);
  }
  return found;
}

/// The one pair axis of a dim, if it has exactly one.
std::optional<std::string> singlePairAxis(const MeshAxes &axes) {
  MeshAxes pair = pairAxesIn(axes);
  return pair.size() == 1 ? std::optional<std::string>(pair.front()) : std::nullopt;
}

enum class Stationary { C, A, B };

class Summa {
public:
  Summa(MatMulOp op, const Mesh &mesh, const PartitionHooks &hooks, const MatMulDims &dims)
      : op_(op), mesh_(mesh), hooks_(hooks), dims_(dims), b_(op) {}

  FailureOr<Value> run() {
    Value a = op_.getLhs(), rhs = op_.getRhs();
    Layout la = hooks_.current(a), lb = hooks_.current(rhs);
    if (!la.partial.empty() || !lb.partial.empty())
      return Value();
    std::optional<std::string> bk = singlePairAxis(lb.dims[dims_.rk]), bn = singlePairAxis(lb.dims[dims_.rn]);
    if (!bk || !bn || *bk == *bn || !otherAxesIn(lb.dims[dims_.rn]).empty())
      return Value(); // B is not split over the pair, one axis per dim
    Layout propagated = hooks_.propagated(op_.getResult());
    std::optional<std::pair<std::string, int64_t>> cRows; // the pair axis on C's rows (not on N)
    if (propagated.dims.size() == (size_t)dims_.rank)
      cRows = rowPairAxis(propagated, dims_.rank - 1);
    // A laid out over the pair (its rows on one axis, K on the other); else resharded to what
    // C's layout and B's imply.
    std::optional<std::pair<std::string, int64_t>> aRows = rowPairAxis(la, dims_.lk);
    std::optional<std::string> ak = singlePairAxis(la.dims[dims_.lk]);
    if (!aRows || !ak || *ak == aRows->first) {
      if (!cRows)
        return Value();
      FailureOr<Value> laidOut = lhsFromResult(a, propagated, *cRows, *bk);
      if (failed(laidOut) || !*laidOut)
        return laidOut;
      a = *laidOut;
      la = hooks_.current(a);
      aRows = rowPairAxis(la, dims_.lk);
      ak = singlePairAxis(la.dims[dims_.lk]);
    }
    if (otherAxesIn(la.dims[dims_.lk]) != otherAxesIn(lb.dims[dims_.rk]))
      return Value(); // K split over other axes differently in A and B
    Stationary kind = Stationary::C;
    if (aRows->first != *bk) {
      bool aRowsOnlyPair = llvm::all_of(la.dims, [&](const MeshAxes &axes) {
        return &axes == &la.dims[dims_.lk] || otherAxesIn(axes).empty();
      });
      kind = cRows && cRows->first == *bk && aRowsOnlyPair ? Stationary::B : Stationary::A;
    }
    return emit(kind, a, la, aRows->first, aRows->second);
  }

private:
  /// A resharded so that SUMMA applies with C laid out as propagated: its rows on C's row axis
  /// (with C's other axes), K on B's K axis when that differs (A stays), else on the other one.
  FailureOr<Value> lhsFromResult(Value a, const Layout &c, const std::pair<std::string, int64_t> &cRows,
                                 const std::string &bk) {
    Layout want = Layout::whole(dims_.rank);
    for (int64_t d = 0; d < dims_.rank; ++d)
      if (d != dims_.lk)
        want.dims[d] = c.dims[dims_.resultDimOfLhs(d)];
    want.dims[dims_.lk] = {cRows.first == bk ? otherPairAxis(bk) : bk};
    return hooks_.reshard(a, want, op_);
  }

  Value broadcast(Value v, StringRef axis, int64_t root) {
    return b_.create<BroadcastFromOp>(op_.getLoc(), v, mesh_.ref(), b_.getStrArrayAttr({axis}),
                                      b_.getI64IntegerAttr(root));
  }
  Value reduceTo(Value v, StringRef axis, int64_t root) {
    return b_.create<ReduceToOp>(op_.getLoc(), v, mesh_.ref(), b_.getStrArrayAttr({axis}), b_.getI64IntegerAttr(root));
  }
  Value product(Value a, Value rhs) {
    return b_.create<MatMulOp>(op_.getLoc(), a, rhs, op_.getTransposeLhsAttr(), op_.getTransposeRhsAttr());
  }

  /// The q steps, summed, and C's layout.
  FailureOr<Value> emit(Stationary kind, Value a, const Layout &la, const std::string &rows, int64_t rowDim) {
    Value rhs = op_.getRhs();
    std::string other = otherPairAxis(rows);
    int64_t q = mesh_.parts({rows});
    Value sum;
    for (int64_t t = 0; t < q; ++t) {
      Value step;
      switch (kind) { // (one statement per op: their order in the IR is then fixed)
      case Stationary::C: { // A's K axis is `other`, B's K axis `rows`
        Value aBlock = broadcast(a, other, t);
        step = product(aBlock, broadcast(rhs, rows, t));
        break;
      }
      case Stationary::A: // B's N axis is `rows`; the product is summed over `other` (K)
        step = reduceTo(product(a, broadcast(rhs, rows, t)), other, t);
        break;
      case Stationary::B: // A's rows are broadcast along `rows`; summed over `other` (K)
        step = reduceTo(product(broadcast(a, rows, t), rhs), other, t);
        break;
      }
      sum = sum ? b_.create<AddOp>(op_.getLoc(), sum, step).getResult() : step;
    }
    Layout c = Layout::whole(dims_.rank);
    for (int64_t d = 0; d < dims_.rank; ++d)
      if (d != dims_.lk)
        c.dims[dims_.resultDimOfLhs(d)] = la.dims[d];
    c.dims[dims_.rank - 1] = {kind == Stationary::B ? rows : other};
    if (kind == Stationary::B)
      c.dims[dims_.resultDimOfLhs(rowDim)] = {other};
    c.partial = otherAxesIn(la.dims[dims_.lk]);
    if (tensorType(sum) != localType(tensorType(op_.getResult()), c))
      return op_.emitError("SUMMA computed ") << sum.getType() << " for the block of " << c.describe();
    hooks_.setCurrent(sum, c);
    if (c.isSharded())
      sum.getDefiningOp()->setAttr(kResultShardingsAttr, b_.getArrayAttr({c.toAttr(mesh_.ref())}));
    return sum;
  }

  RankedTensorType localType(RankedTensorType global, const Layout &l) const {
    SmallVector<int64_t> shape(global.getShape());
    for (size_t d = 0; d < shape.size(); ++d)
      shape[d] /= mesh_.parts(l.dims[d]);
    return RankedTensorType::get(shape, global.getElementType());
  }

  MatMulOp op_;
  const Mesh &mesh_;
  const PartitionHooks &hooks_;
  MatMulDims dims_;
  OpBuilder b_;
};

} // namespace

bool hasSummaAxes(const Mesh &mesh) {
  return mesh.hasAxis(kTpRowAxis) && mesh.hasAxis(kTpColAxis) && mesh.parts({kTpRowAxis.str()}) > 1 &&
         mesh.parts({kTpRowAxis.str()}) == mesh.parts({kTpColAxis.str()});
}

FailureOr<Value> partitionSumma(MatMulOp op, const Mesh &mesh, const PartitionHooks &hooks) {
  if (!hasSummaAxes(mesh))
    return Value();
  std::optional<MatMulDims> dims = matMulDims(op);
  if (!dims)
    return Value();
  return Summa(op, mesh, hooks, *dims).run();
}

} // namespace cpc
