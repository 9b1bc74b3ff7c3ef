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
#include "passes/MatMulStrategies.h"

#include "mlir/IR/Builders.h"

using namespace mlir;

namespace cpc {

namespace {

RankedTensorType tensorType(Value v) { return llvm::cast<RankedTensorType>(v.getType()); }

/// Whether `axis` is one of the q x q pair (the mesh's tensor_row and tensor_col axes).
bool isPairAxis(const Mesh &mesh, StringRef axis) {
  MeshAxisRole role = mesh.roleOf(axis);
  return role == MeshAxisRole::TensorRow || role == MeshAxisRole::TensorCol;
}

/// The pair axes among `axes`.
MeshAxes pairAxesIn(const Mesh &mesh, const MeshAxes &axes) {
  MeshAxes found;
  for (const std::string &a : axes)
    if (isPairAxis(mesh, a))
      found.push_back(a);
  return found;
}

MeshAxes otherAxesIn(const Mesh &mesh, const MeshAxes &axes) {
  MeshAxes found;
  for (const std::string &a : axes)
    if (!isPairAxis(mesh, a))
      found.push_back(a);
  return found;
}

std::string otherPairAxis(const Mesh &mesh, StringRef axis) {
  return mesh.axisWith(mesh.roleOf(axis) == MeshAxisRole::TensorRow ? MeshAxisRole::TensorCol : MeshAxisRole::TensorRow);
}

/// The one pair axis on the rows of `l` (the dims of A or C other than `skip`), and its dim.
std::optional<std::pair<std::string, int64_t>> rowPairAxis(const Mesh &mesh, const Layout &l, int64_t skip) {
  std::optional<std::pair<std::string, int64_t>> found;
  for (int64_t d = 0; d < (int64_t)l.dims.size(); ++d) {
    if (d == skip)
      continue;
    MeshAxes pair = pairAxesIn(mesh, l.dims[d]);
    if (pair.empty())
      continue;
    if (found || pair.size() > 1)
      return std::nullopt;
    found = std::make_pair(pair.front(), d);
  }
  return found;
}

/// The one pair axis of a dim, if it has exactly one.
std::optional<std::string> singlePairAxis(const Mesh &mesh, const MeshAxes &axes) {
  MeshAxes pair = pairAxesIn(mesh, axes);
  return pair.size() == 1 ? std::optional<std::string>(pair.front()) : std::nullopt;
}

/// Which operand is laid out over B's K axis where A's is not: whether the product of a rank
/// pair `rows` x other is summed over the other axis (A or B stays) or not (C stays).
enum class Stationary { C, A, B };

/// SUMMA's steps for operand layouts `la`, `lb` (B a matrix over the pair, one axis per dim; A's
/// rows on one pair axis and K on the other): which tensor stays, A's row axis and its dim, and
/// C's layout. `c` (C's layout so far) picks B over A staying when its rows lie on B's K axis.
struct SummaPlan {
  Stationary kind = Stationary::C;
  std::string rows; // the pair axis of A's rows
  int64_t rowDim = 0;
  Layout result;
};

/// B's pair axes on K and N, when B is laid out as SUMMA needs.
std::optional<std::pair<std::string, std::string>> rhsPairAxes(const Mesh &mesh, const Layout &lb,
                                                                const MatMulDims &dims) {
  if (!lb.partial.empty() || lb.dims.size() != 2)
    return std::nullopt;
  std::optional<std::string> bk = singlePairAxis(mesh, lb.dims[dims.rk]), bn = singlePairAxis(mesh, lb.dims[dims.rn]);
  if (!bk || !bn || *bk == *bn || !otherAxesIn(mesh, lb.dims[dims.rn]).empty())
    return std::nullopt;
  return std::make_pair(*bk, *bn);
}

std::optional<SummaPlan> planSumma(const Mesh &mesh, const MatMulDims &dims, const Layout &la, const Layout &lb,
                                   const Layout *c) {
  std::optional<std::pair<std::string, std::string>> b = rhsPairAxes(mesh, lb, dims);
  if (!b || !la.partial.empty() || la.dims.size() != (size_t)dims.rank)
    return std::nullopt;
  std::optional<std::pair<std::string, int64_t>> aRows = rowPairAxis(mesh, la, dims.lk);
  std::optional<std::string> ak = singlePairAxis(mesh, la.dims[dims.lk]);
  if (!aRows || !ak || *ak == aRows->first ||
      otherAxesIn(mesh, la.dims[dims.lk]) != otherAxesIn(mesh, lb.dims[dims.rk]))
    return std::nullopt;
  SummaPlan plan;
  plan.rows = aRows->first;
  plan.rowDim = aRows->second;
  if (aRows->first != b->first) { // A's K axis is B's: A or B stays, the products are reduced
    std::optional<std::pair<std::string, int64_t>> cRows;
    if (c && c->dims.size() == (size_t)dims.rank)
      cRows = rowPairAxis(mesh, *c, dims.rank - 1);
    bool aRowsOnlyPair = true;
    for (int64_t d = 0; d < dims.rank; ++d)
      aRowsOnlyPair &= d == dims.lk || otherAxesIn(mesh, la.dims[d]).empty();
    plan.kind = cRows && cRows->first == b->first && aRowsOnlyPair ? Stationary::B : Stationary::A;
  }
  std::string other = otherPairAxis(mesh, plan.rows);
  Layout &r = plan.result;
  r = Layout::whole(dims.rank);
  for (int64_t d = 0; d < dims.rank; ++d)
    if (d != dims.lk)
      r.dims[dims.resultDimOfLhs(d)] = la.dims[d];
  r.dims[dims.rank - 1] = {plan.kind == Stationary::B ? plan.rows : other};
  if (plan.kind == Stationary::B)
    r.dims[dims.resultDimOfLhs(plan.rowDim)] = {other};
  r.partial = otherAxesIn(mesh, la.dims[dims.lk]); // K's other axes (2.5D's depth): a partial sum over them
  return plan;
}

class Summa : MatMulRewriter {
public:
  Summa(MatMulOp op, const Mesh &mesh, const PartitionHooks &hooks, const MatMulDims &dims)
      : MatMulRewriter(op, mesh, hooks, dims) {}

  FailureOr<Value> run() {
    Value a = op_.getLhs();
    Layout la = hooks_.current(a), lb = hooks_.current(op_.getRhs());
    std::optional<std::pair<std::string, std::string>> b = rhsPairAxes(mesh_, lb, dims_);
    if (!b)
      return Value(); // B is not split over the pair, one axis per dim
    Layout propagated = hooks_.propagated(op_.getResult());
    std::optional<SummaPlan> plan = planSumma(mesh_, dims_, la, lb, &propagated);
    if (!plan) { // A resharded to what C's layout and B's imply, if they do
      std::optional<std::pair<std::string, int64_t>> cRows;
      if (propagated.dims.size() == (size_t)dims_.rank)
        cRows = rowPairAxis(mesh_, propagated, dims_.rank - 1);
      if (!cRows || !la.partial.empty())
        return Value();
      FailureOr<Value> laidOut = lhsFromResult(a, propagated, *cRows, b->first);
      if (failed(laidOut) || !*laidOut)
        return laidOut;
      a = *laidOut;
      la = hooks_.current(a);
      plan = planSumma(mesh_, dims_, la, lb, &propagated);
      if (!plan)
        return Value();
    }
    return emit(*plan, a);
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
    want.dims[dims_.lk] = {cRows.first == bk ? otherPairAxis(mesh_, bk) : bk};
    return hooks_.reshard(a, want, op_);
  }

  Value broadcast(Value v, StringRef axis, int64_t root) {
    return labelled(b_.create<BroadcastFromOp>(op_.getLoc(), v, mesh_.ref(), b_.getStrArrayAttr({axis}),
                                               b_.getI64IntegerAttr(root)));
  }
  Value reduceTo(Value v, StringRef axis, int64_t root) {
    return labelled(
        b_.create<ReduceToOp>(op_.getLoc(), v, mesh_.ref(), b_.getStrArrayAttr({axis}), b_.getI64IntegerAttr(root)));
  }
  Value product(Value a, Value rhs) {
    return labelled(b_.create<MatMulOp>(op_.getLoc(), a, rhs, op_.getTransposeLhsAttr(), op_.getTransposeRhsAttr()));
  }

  /// The q steps, summed, laid out as the plan says.
  FailureOr<Value> emit(const SummaPlan &plan, Value a) {
    Value rhs = op_.getRhs();
    const std::string &rows = plan.rows;
    std::string other = otherPairAxis(mesh_, rows);
    int64_t q = mesh_.parts({rows});
    Value sum;
    for (int64_t t = 0; t < q; ++t) {
      Value step;
      switch (plan.kind) { // (one statement per op: their order in the IR is then fixed)
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
      sum = sum ? labelled(b_.create<AddOp>(op_.getLoc(), sum, step)) : step;
    }
    return finish(sum, plan.result, "SUMMA");
  }
};

} // namespace

bool hasSummaAxes(const Mesh &mesh) {
  std::string row = mesh.axisWith(MeshAxisRole::TensorRow), col = mesh.axisWith(MeshAxisRole::TensorCol);
  return !row.empty() && !col.empty() && mesh.parts({row}) > 1 && mesh.parts({row}) == mesh.parts({col});
}

std::optional<Layout> summaResultLayout(MatMulOp op, const Mesh &mesh, const Layout &a, const Layout &b,
                                        const Layout &c) {
  std::optional<MatMulDims> dims = matMulDims(op);
  if (!hasSummaAxes(mesh) || !dims)
    return std::nullopt;
  std::optional<SummaPlan> plan = planSumma(mesh, *dims, a, b, &c);
  return plan ? std::optional<Layout>(plan->result) : std::nullopt;
}

bool hasSummaRhs(MatMulOp op, const Mesh &mesh, const Layout &b) {
  std::optional<MatMulDims> dims = matMulDims(op);
  return hasSummaAxes(mesh) && dims && rhsPairAxes(mesh, b, *dims).has_value();
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
