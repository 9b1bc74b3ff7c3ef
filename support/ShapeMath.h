//===- ShapeMath.h - op shape rules in plain C++, for the dialect and the kernels ===//
//
// The result shape of an op from its operands' shapes and attributes, written once: the
// dialect's shape functions (inferReturnTypes) and the kernels' checks of untrusted plans
// (kernels/Checks.cpp) both call these, so that a plan the compiler would not write is refused
// at load with the compiler's words. Header-only and free of MLIR: the runtime and the kernels
// do not link it.
//
#ifndef CPC_SUPPORT_SHAPEMATH_H
#define CPC_SUPPORT_SHAPEMATH_H

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace cpc::shapes {

using Shape = std::vector<int64_t>;

/// A rule's result: the shape, or why there is none (the words users see).
struct Inferred {
  Shape shape;
  std::string error;
  bool ok() const { return error.empty(); }
  static Inferred fail(std::string why) { return {{}, std::move(why)}; }
};

/// "[2,3]"
inline std::string str(const Shape &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

/// numpy broadcast of two shapes (right-aligned; a dim of 1 stretches).
inline Inferred broadcast(const Shape &a, const Shape &b) {
  size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1)
      return Inferred::fail("shapes " + str(a) + " and " + str(b) + " do not broadcast");
    out[i] = da == 1 ? db : da;
  }
  return {out, ""};
}

/// cpc.matmul: numpy matmul of the operands, each first transposed in its last two dims when
/// asked; a rank-1 lhs is a row, a rank-1 rhs a column, and neither dim appears in the result.
inline Inferred matmul(const Shape &lhs, const Shape &rhs, bool transposeLhs, bool transposeRhs) {
  if (lhs.empty() || rhs.empty())
    return Inferred::fail("operands must have rank >= 1");
  if ((transposeLhs && lhs.size() < 2) || (transposeRhs && rhs.size() < 2))
    return Inferred::fail("only operands of rank >= 2 can be transposed");
  Shape l = lhs, r = rhs;
  if (transposeLhs)
    std::swap(l[l.size() - 1], l[l.size() - 2]);
  if (transposeRhs)
    std::swap(r[r.size() - 1], r[r.size() - 2]);
  bool lhsVector = l.size() == 1, rhsVector = r.size() == 1;
  if (lhsVector)
    l.insert(l.begin(), 1);
  if (rhsVector)
    r.push_back(1);
  if (l.back() != r[r.size() - 2])
    return Inferred::fail("contracting dims differ: " + str(lhs) + " x " + str(rhs));
  Inferred batch = broadcast(Shape(l.begin(), l.end() - 2), Shape(r.begin(), r.end() - 2));
  if (!batch.ok())
    return Inferred::fail("batch dims do not broadcast: " + str(lhs) + " x " + str(rhs));
  if (!lhsVector)
    batch.shape.push_back(l[l.size() - 2]);
  if (!rhsVector)
    batch.shape.push_back(r.back());
  return batch;
}

/// cpc.transpose: result dim i is input dim perm[i].
inline Inferred transpose(const Shape &in, const Shape &perm) {
  if (perm.size() != in.size())
    return Inferred::fail("permutation size must equal the input rank");
  std::vector<bool> used(perm.size(), false);
  Shape out;
  for (int64_t p : perm) {
    if (p < 0 || p >= (int64_t)perm.size() || used[p])
      return Inferred::fail("permutation must be a permutation of [0, rank)");
    used[p] = true;
    out.push_back(in[p]);
  }
  return {out, ""};
}

/// cpc.concat: the inputs joined along `axis` (in [0, rank)); the other dims agree.
inline Inferred concat(const std::vector<Shape> &inputs, int64_t axis) {
  if (inputs.empty())
    return Inferred::fail("needs at least one input");
  const Shape &first = inputs.front();
  int64_t rank = first.size();
  if (axis < 0 || axis >= rank)
    return Inferred::fail("axis " + std::to_string(axis) + " out of range for rank " + std::to_string(rank));
  Shape out = first;
  out[axis] = 0;
  for (const Shape &in : inputs) {
    if ((int64_t)in.size() != rank)
      return Inferred::fail("inputs must share rank and element type");
    for (int64_t d = 0; d < rank; ++d)
      if (d != axis && in[d] != first[d])
        return Inferred::fail("inputs differ in dim " + std::to_string(d) + " outside the axis");
    out[axis] += in[axis];
  }
  return {out, ""};
}

/// cpc.gather: dim `axis` (in [0, rank)) of `data` replaced by the indices' dims.
inline Inferred gather(const Shape &data, const Shape &indices, int64_t axis) {
  if (axis < 0 || axis >= (int64_t)data.size())
    return Inferred::fail("axis " + std::to_string(axis) + " out of range for rank " + std::to_string(data.size()));
  Shape out(data.begin(), data.begin() + axis);
  out.insert(out.end(), indices.begin(), indices.end());
  out.insert(out.end(), data.begin() + axis + 1, data.end());
  return {out, ""};
}

/// A reduction over `axes` (sorted, unique, in [0, rank)): reduced dims dropped, or kept as 1.
inline Inferred reduce(const Shape &in, const Shape &axes, bool keepdims) {
  int64_t rank = in.size();
  for (size_t i = 0; i < axes.size(); ++i) {
    if (axes[i] < 0 || axes[i] >= rank)
      return Inferred::fail("reduction axis " + std::to_string(axes[i]) + " out of range for rank " +
                            std::to_string(rank));
    if (i && axes[i] <= axes[i - 1])
      return Inferred::fail("reduction axes must be sorted and unique");
  }
  Shape out;
  for (int64_t d = 0; d < rank; ++d) {
    bool reduced = std::find(axes.begin(), axes.end(), d) != axes.end();
    if (!reduced)
      out.push_back(in[d]);
    else if (keepdims)
      out.push_back(1);
  }
  return {out, ""};
}

} // namespace cpc::shapes

#endif
