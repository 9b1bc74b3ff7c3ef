//===- Matmul3D.cpp - the 3D partitioning strategy of a matmul ------------===//
//
// On a mesh with the 3D tensor-parallel axes (tp_wt x tp_in x tp_out, q each), a matmul C = A B
// whose operands each have the three axes on their two matrix dims (one dim over two of them,
// major first, the other over the third) is computed as Agarwal's 3D algorithm, which
// Colossal-AI's 3D layers follow: each operand is all-gathered over the minor axis of each of
// its dims, which leaves A [rows over r, K over k] and B [K over k, N over n] on three distinct
// axes; the local product is a partial sum over k, reduce-scattered over k along C's rows, so C
// comes out [rows over (r, k), N over n] (or along N, [rows over r, N over (n, k)], where C is
// wanted so: the gradient of torch's [out, in] weight). For the forward Linear (A = X [b/q^2 over (wt, in), s,
// h/q over out], B = W [h/q^2 over (out, wt), k/q over in]) that is: gather X over tp_in and W
// over tp_wt, reduce-scatter Y over tp_out, Y = [b/q^2 over (wt, out), s, k/q over in]: the next
// Linear finds tp_in and tp_out swapped. Both gradients are the same algorithm on their own
// operands (dX = dY W^T: gather dY over tp_out and W over tp_wt, reduce-scatter over tp_in;
// dW = dY^T X: gather dY over tp_out and X over tp_in, reduce-scatter over tp_wt), so each
// comes out laid out as its forward value. Other mesh axes on the rows (dp) pass through.
//
#include "passes/MatMulStrategies.h"

#include "mlir/IR/Builders.h"

using namespace mlir;

namespace cpc {

namespace {

RankedTensorType tensorType(Value v) { return llvm::cast<RankedTensorType>(v.getType()); }

/// Whether `a` is one of the q x q x q axes (the mesh's tensor_weight, tensor_input and
/// tensor_output axes).
bool is3DAxis(const Mesh &mesh, StringRef a) {
  MeshAxisRole role = mesh.roleOf(a);
  return role == MeshAxisRole::TensorWeight || role == MeshAxisRole::TensorInput || role == MeshAxisRole::TensorOutput;
}

/// The 3D axes of a dim, in its order (major first).
MeshAxes axes3DIn(const Mesh &mesh, const MeshAxes &axes) {
  MeshAxes found;
  for (const std::string &a : axes)
    if (is3DAxis(mesh, a))
      found.push_back(a);
  return found;
}

MeshAxes otherAxesIn(const Mesh &mesh, const MeshAxes &axes) {
  MeshAxes found;
  for (const std::string &a : axes)
    if (!is3DAxis(mesh, a))
      found.push_back(a);
  return found;
}

/// An operand's 3D axes: its row dim (of A; the K dim of B) and their axes, the other dim's.
struct Operand3D {
  int64_t rowDim = -1; // the non-K dim of A holding 3D axes; for B, unused
  MeshAxes rows, k;    // 3D axes of the rows (or of B's N) and of K, major first
};

/// The 3D plan of a product: the gathers (the minor axes), the three core axes and C's layout.
struct Plan3D {
  Operand3D a, b; // b.rows: B's N axes
  std::string r, k, n;
  bool scatterOnN = false; // k scattered onto N (else onto the rows)
  Layout result;
};

/// Whether a dim's 3D axes are minor to its other axes (a gather over the minor axis, then the
/// scatter of k after them, keep the blocks contiguous).
bool minorTo3D(const Mesh &mesh, const MeshAxes &axes) {
  bool seen = false;
  for (const std::string &a : axes) {
    if (is3DAxis(mesh, a))
      seen = true;
    else if (seen)
      return false;
  }
  return true;
}

std::optional<Plan3D> plan3D(const Mesh &mesh, const MatMulDims &dims, const Layout &la, const Layout &lb,
                             const Layout *c) {
  if (!la.partial.empty() || !lb.partial.empty() || la.dims.size() != (size_t)dims.rank || lb.dims.size() != 2)
    return std::nullopt;
  Plan3D p;
  for (int64_t d = 0; d < dims.rank; ++d) {
    if (d == dims.lk)
      continue;
    MeshAxes found = axes3DIn(mesh, la.dims[d]);
    if (found.empty())
      continue;
    if (p.a.rowDim >= 0 || !minorTo3D(mesh, la.dims[d]))
      return std::nullopt;
    p.a.rowDim = d;
    p.a.rows = found;
  }
  p.a.k = axes3DIn(mesh, la.dims[dims.lk]);
  p.b.k = axes3DIn(mesh, lb.dims[dims.rk]);
  p.b.rows = axes3DIn(mesh, lb.dims[dims.rn]);
  auto sized = [](const MeshAxes &x) { return x.size() == 1 || x.size() == 2; };
  MeshAxes kOthers = otherAxesIn(mesh, la.dims[dims.lk]);
  if (p.a.rowDim < 0 || !sized(p.a.rows) || !sized(p.a.k) || !sized(p.b.k) || !sized(p.b.rows) ||
      p.a.rows.size() + p.a.k.size() != 3 || p.b.k.size() + p.b.rows.size() != 3 ||
      !minorTo3D(mesh, la.dims[dims.lk]) || !minorTo3D(mesh, lb.dims[dims.rk]) ||
      otherAxesIn(mesh, lb.dims[dims.rk]) != kOthers ||
      lb.dims[dims.rn] != p.b.rows)
    return std::nullopt; // K's other axes alike in A and B (dp: C is a partial sum over them), none on N
  p.r = p.a.rows.front();
  p.k = p.a.k.front();
  p.n = p.b.rows.front();
  if (p.b.k.front() != p.k || p.r == p.k || p.r == p.n || p.k == p.n)
    return std::nullopt;
  // k is scattered onto C's rows, or onto N where C's layout so far says so (a weight gradient
  // laid out as torch's [out, in] weight: dW = dY^T X scatters onto X's features).
  p.scatterOnN = c && c->dims.size() == (size_t)dims.rank && c->dims[dims.rank - 1] == MeshAxes{p.n, p.k};
  Layout &r = p.result;
  r = Layout::whole(dims.rank);
  for (int64_t d = 0; d < dims.rank; ++d)
    if (d != dims.lk)
      r.dims[dims.resultDimOfLhs(d)] = la.dims[d];
  MeshAxes &rows = r.dims[dims.resultDimOfLhs(p.a.rowDim)];
  llvm::erase_if(rows, [&](const std::string &a) { return is3DAxis(mesh, a); });
  rows.push_back(p.r);
  if (!p.scatterOnN)
    rows.push_back(p.k);
  r.dims[dims.rank - 1] = p.scatterOnN ? MeshAxes{p.n, p.k} : MeshAxes{p.n};
  r.partial = kOthers;
  return p;
}

/// Whether `l` splits `op`'s result into whole blocks (the reduce-scatter divides its rows).
bool divides(MatMulOp op, const Mesh &mesh, const Layout &l) {
  ArrayRef<int64_t> shape = tensorType(op.getResult()).getShape();
  for (size_t d = 0; d < shape.size(); ++d)
    if (shape[d] % mesh.parts(l.dims[d]))
      return false;
  return true;
}

class Matmul3D : MatMulRewriter {
public:
  Matmul3D(MatMulOp op, const Mesh &mesh, const PartitionHooks &hooks, const MatMulDims &dims)
      : MatMulRewriter(op, mesh, hooks, dims) {}

  FailureOr<Value> run() {
    Layout propagated = hooks_.propagated(op_.getResult());
    std::optional<Plan3D> p = plan3D(mesh_, dims_, hooks_.current(op_.getLhs()), hooks_.current(op_.getRhs()), &propagated);
    if (!p || !divides(op_, mesh_, p->result))
      return Value();
    Value a = gatherMinor(op_.getLhs(), p->a.rowDim, p->a.rows);
    a = gatherMinor(a, dims_.lk, p->a.k);
    Value rhs = gatherMinor(op_.getRhs(), dims_.rk, p->b.k);
    rhs = gatherMinor(rhs, dims_.rn, p->b.rows);
    Value product = labelled(b_.create<MatMulOp>(op_.getLoc(), a, rhs, op_.getTransposeLhsAttr(),
                                                 op_.getTransposeRhsAttr()));
    int64_t dim = p->scatterOnN ? dims_.rank - 1 : dims_.resultDimOfLhs(p->a.rowDim);
    auto type = tensorType(product);
    SmallVector<int64_t> shape(type.getShape());
    shape[dim] /= mesh_.parts({p->k});
    Value c = labelled(b_.create<ReduceScatterOp>(op_.getLoc(), RankedTensorType::get(shape, type.getElementType()),
                                                  product, mesh_.ref(), b_.getStrArrayAttr({p->k}),
                                                  dim ? b_.getI64IntegerAttr(dim) : IntegerAttr()));
    return finish(c, p->result, "the 3D matmul");
  }

private:
  /// `v` gathered over the minor one of a dim's two 3D axes (nothing when it has one).
  Value gatherMinor(Value v, int64_t dim, const MeshAxes &axes3D) {
    if (axes3D.size() < 2)
      return v;
    const std::string &minor = axes3D.back();
    auto type = tensorType(v);
    SmallVector<int64_t> shape(type.getShape());
    shape[dim] *= mesh_.parts({minor});
    Value g = labelled(b_.create<AllGatherOp>(op_.getLoc(), RankedTensorType::get(shape, type.getElementType()), v,
                                              mesh_.ref(), b_.getStrArrayAttr({minor}),
                                              dim ? b_.getI64IntegerAttr(dim) : IntegerAttr()));
    Layout l = hooks_.current(v);
    l.dims[dim].pop_back();
    hooks_.setCurrent(g, l);
    return g;
  }
};

} // namespace

bool has3DAxes(const Mesh &mesh) {
  std::string w = mesh.axisWith(MeshAxisRole::TensorWeight), in = mesh.axisWith(MeshAxisRole::TensorInput),
              out = mesh.axisWith(MeshAxisRole::TensorOutput);
  if (w.empty() || in.empty() || out.empty())
    return false;
  int64_t q = mesh.parts({w});
  return q > 1 && mesh.parts({in}) == q && mesh.parts({out}) == q;
}

bool has3DRhs(MatMulOp op, const Mesh &mesh, const Layout &b) {
  std::optional<MatMulDims> dims = matMulDims(op);
  if (!has3DAxes(mesh) || !dims || !b.partial.empty() || b.dims.size() != 2)
    return false;
  MeshAxes k = axes3DIn(mesh, b.dims[dims->rk]), n = axes3DIn(mesh, b.dims[dims->rn]);
  return k.size() + n.size() == 3 && !k.empty() && !n.empty();
}

std::optional<Layout> matmul3DResultLayout(MatMulOp op, const Mesh &mesh, const Layout &a, const Layout &b,
                                           const Layout &c) {
  std::optional<MatMulDims> dims = matMulDims(op);
  if (!has3DAxes(mesh) || !dims)
    return std::nullopt;
  std::optional<Plan3D> p = plan3D(mesh, *dims, a, b, &c);
  return p && divides(op, mesh, p->result) ? std::optional<Layout>(p->result) : std::nullopt;
}

FailureOr<Value> partitionMatmul3D(MatMulOp op, const Mesh &mesh, const PartitionHooks &hooks) {
  std::optional<MatMulDims> dims = matMulDims(op);
  if (!has3DAxes(mesh) || !dims)
    return Value();
  return Matmul3D(op, mesh, hooks, *dims).run();
}

} // namespace cpc
