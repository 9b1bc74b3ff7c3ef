//===- Shape.cpp - ONNX shape and data-movement ops -> cpc ----------------===//
//
// Every op here folds on the host when its data input is a constant, which is how the shape
// subgraphs of torch exports (Shape -> Gather -> Unsqueeze -> Concat -> Reshape) disappear.
//
#include <algorithm>

#include "frontends/onnx/NodeImporter.h"
#include "support/CheckedSize.h"

using namespace mlir;

namespace cpc::onnx_import {
namespace {

bool foldable(NodeImporter &n, size_t dataInput = 0) {
  const ConstTensor *c = n.constInput(dataInput);
  return c && c->numElements() <= kMaxFoldElements;
}

void importConstant(NodeImporter &n) {
  const auto &node = n.node();
  if (node.attribute_size() != 1)
    n.fail("expects exactly one value attribute");
  const auto &a = node.attribute(0);
  if (a.name() == "value")
    n.setOutput(0, ConstTensor::fromProto(a.t()));
  else if (a.name() == "value_float")
    n.setOutput(0, ConstTensor::fromDoubles({a.f()}, {}));
  else if (a.name() == "value_floats")
    n.setOutput(0, ConstTensor::fromDoubles({a.floats().begin(), a.floats().end()}, {(int64_t)a.floats_size()}));
  else if (a.name() == "value_int")
    n.setOutput(0, ConstTensor::fromInts({a.i()}, {}));
  else if (a.name() == "value_ints")
    n.setOutput(0, ConstTensor::fromInts({a.ints().begin(), a.ints().end()}, {(int64_t)a.ints_size()}));
  else
    n.fail("attribute '" + a.name() + "' is not supported");
}

void importShape(NodeImporter &n) {
  std::vector<int64_t> shape = n.inputShape(0);
  int64_t rank = shape.size();
  int64_t start = n.attrInt("start", 0), end = n.attrInt("end", rank);
  start = std::clamp<int64_t>(start < 0 ? start + rank : start, 0, rank);
  end = std::clamp<int64_t>(end < 0 ? end + rank : end, 0, rank);
  std::vector<int64_t> dims(shape.begin() + start, shape.begin() + std::max(start, end));
  n.setOutput(0, ConstTensor::fromInts(dims, {(int64_t)dims.size()}));
}

void importSize(NodeImporter &n) {
  n.setOutput(0, ConstTensor::fromInts({numElementsOf(n.inputShape(0))}, {}));
}

void importConstantOfShape(NodeImporter &n) {
  std::vector<int64_t> shape = n.requireConstInput(0, "shape").toInts();
  ConstTensor fill = n.node().attribute_size() ? ConstTensor::fromProto(n.attrTensor("value"))
                                               : ConstTensor::fromDoubles({0.0}, {1});
  if (fill.numElements() != 1)
    n.fail("value must hold one element");
  for (int64_t d : shape)
    if (d < 0)
      n.fail("negative dim in shape " + shapeToString(shape));
  ConstTensor scalar = fill.reshaped({});
  if (numElementsOf(shape) <= kMaxFoldElements) {
    n.setOutput(0, scalar.broadcastTo(shape));
    return;
  }
  // Large fills stay a splat constant in the IR.
  Value s = n.constant(scalar);
  auto type = RankedTensorType::get(shape, llvm::cast<RankedTensorType>(s.getType()).getElementType());
  n.setOutput(0, n.emitTyped<BroadcastOp>(type, {s}));
}

/// ONNX Reshape target: 0 copies the input dim (unless allowzero), -1 is inferred.
std::vector<int64_t> reshapeTarget(NodeImporter &n, const std::vector<int64_t> &in,
                                   std::vector<int64_t> target, bool allowZero) {
  int64_t known = 1, inferAt = -1;
  for (size_t i = 0; i < target.size(); ++i) {
    if (target[i] == 0 && !allowZero) {
      if (i >= in.size())
        n.fail("shape entry 0 at position " + std::to_string(i) + " has no input dim to copy");
      target[i] = in[i];
    }
    if (target[i] == -1) {
      if (inferAt >= 0)
        n.fail("shape " + shapeToString(target) + " has more than one -1");
      inferAt = i;
    } else if (target[i] < 0) {
      n.fail("invalid shape entry " + std::to_string(target[i]));
    } else if (auto product = checkedMul(known, target[i])) {
      known = *product;
    } else {
      n.fail("shape " + shapeToString(target) + " has more elements than 64 bits count");
    }
  }
  int64_t total = numElementsOf(in);
  if (inferAt >= 0) {
    if (known == 0 || total % known)
      n.fail("cannot reshape " + shapeToString(in) + " to " + shapeToString(target));
    target[inferAt] = total / known;
  }
  if (numElementsOf(target) != total)
    n.fail("cannot reshape " + shapeToString(in) + " to " + shapeToString(target));
  return target;
}

void setReshaped(NodeImporter &n, const std::vector<int64_t> &shape) {
  if (foldable(n))
    n.setOutput(0, n.constInput(0)->reshaped(shape));
  else
    n.setOutput(0, n.reshape(n.input(0), shape));
}

void importReshape(NodeImporter &n) {
  std::vector<int64_t> in = n.inputShape(0);
  auto target = reshapeTarget(n, in, n.requireConstInput(1, "shape").toInts(), n.attrInt("allowzero", 0));
  setReshaped(n, target);
}

std::vector<int64_t> axesInput(NodeImporter &n, size_t index, const char *attr) {
  if (n.hasInput(index))
    return n.requireConstInput(index, "axes").toInts();
  return n.attrInts(attr, std::vector<int64_t>{});
}

void importUnsqueeze(NodeImporter &n) {
  std::vector<int64_t> in = n.inputShape(0);
  std::vector<int64_t> axes = axesInput(n, 1, "axes");
  int64_t rank = in.size() + axes.size();
  std::vector<bool> inserted(rank, false);
  for (int64_t a : axes) {
    int64_t axis = n.normalizeAxis(a, rank);
    if (inserted[axis])
      n.fail("axis " + std::to_string(a) + " repeated");
    inserted[axis] = true;
  }
  std::vector<int64_t> out;
  size_t next = 0;
  for (int64_t d = 0; d < rank; ++d)
    out.push_back(inserted[d] ? 1 : in[next++]);
  setReshaped(n, out);
}

void importSqueeze(NodeImporter &n) {
  std::vector<int64_t> in = n.inputShape(0);
  std::vector<int64_t> axes = axesInput(n, 1, "axes");
  std::vector<bool> drop(in.size(), false);
  if (axes.empty())
    for (size_t d = 0; d < in.size(); ++d)
      drop[d] = in[d] == 1;
  for (int64_t a : axes) {
    int64_t axis = n.normalizeAxis(a, in.size());
    if (in[axis] != 1)
      n.fail("cannot squeeze dim " + std::to_string(a) + " of size " + std::to_string(in[axis]));
    drop[axis] = true;
  }
  std::vector<int64_t> out;
  for (size_t d = 0; d < in.size(); ++d)
    if (!drop[d])
      out.push_back(in[d]);
  setReshaped(n, out);
}

void importFlatten(NodeImporter &n) {
  std::vector<int64_t> in = n.inputShape(0);
  int64_t rank = in.size();
  int64_t axis = n.attrInt("axis", 1);
  axis = axis < 0 ? axis + rank : axis;
  if (axis < 0 || axis > rank)
    n.fail("axis out of range");
  int64_t outer = numElementsOf({in.begin(), in.begin() + axis});
  setReshaped(n, {outer, numElementsOf(in) / std::max<int64_t>(outer, 1)});
}

void importTranspose(NodeImporter &n) {
  int64_t rank = n.inputShape(0).size();
  std::vector<int64_t> perm;
  for (int64_t d = rank - 1; d >= 0; --d)
    perm.push_back(d);
  perm = n.attrInts("perm", perm);
  if (foldable(n)) {
    if ((int64_t)perm.size() != rank)
      n.fail("perm size differs from the rank");
    n.setOutput(0, n.constInput(0)->transpose(perm));
    return;
  }
  n.setOutput(0, n.emit1<TransposeOp>({n.input(0)}, {n.namedI64s("permutation", perm)}));
}

void importConcat(NodeImporter &n) {
  int64_t rank = n.inputShape(0).size();
  int64_t axis = n.normalizeAxis(n.attrInt("axis"), rank);
  bool allConst = n.allInputsConstant();
  std::vector<const ConstTensor *> parts;
  SmallVector<Value> operands;
  for (size_t i = 0; i < n.numInputs(); ++i) {
    if ((int64_t)n.inputShape(i).size() != rank)
      n.fail("inputs differ in rank");
    if (allConst)
      parts.push_back(n.constInput(i));
  }
  if (allConst) {
    n.setOutput(0, ConstTensor::concat(parts, axis));
    return;
  }
  for (size_t i = 0; i < n.numInputs(); ++i)
    if (n.inputShape(i)[axis] > 0) // torch emits empty pieces; cpc has no zero-size tensors to join
      operands.push_back(n.input(i));
  n.setOutput(0, operands.size() == 1 ? operands[0] : n.emit1<ConcatOp>(operands, {n.namedI64("axis", axis)}));
}

/// The indices a negative-step ONNX Slice visits along one dim of size `dim`: from `start`
/// (clamped to [0, dim-1]) down to, not including, `end` (clamped to [-1, dim-1]).
std::vector<int64_t> descendingIndices(int64_t start, int64_t end, int64_t step, int64_t dim) {
  int64_t s = std::clamp<int64_t>(start < 0 ? start + dim : start, 0, dim - 1);
  int64_t e = std::clamp<int64_t>(end < 0 ? end + dim : end, -1, dim - 1);
  std::vector<int64_t> indices;
  for (int64_t i = s; i > e; i += step)
    indices.push_back(i);
  return indices;
}

/// x gathered along `axis` at constant `indices` (how a negative-step slice runs: cpc.slice
/// strides are positive).
ImportedValue gatherAlong(NodeImporter &n, ImportedValue x, int64_t axis, const std::vector<int64_t> &indices) {
  ConstTensor idx = ConstTensor::fromInts(indices, {(int64_t)indices.size()});
  if (x.host)
    return n.imported(x.host->gather(idx, axis));
  return n.imported(n.emit1<GatherOp>({x.value, n.constant(idx)}, {n.namedI64("axis", axis)}));
}

/// ONNX Slice with constant starts/ends/axes/steps: cpc.slice for the positive steps, then a
/// gather of the visited indices along each axis with a negative step (torch's flip, x[::-1]).
void importSlice(NodeImporter &n) {
  std::vector<int64_t> in = n.inputShape(0);
  int64_t rank = in.size();
  std::vector<int64_t> starts = n.requireConstInput(1, "starts").toInts();
  std::vector<int64_t> ends = n.requireConstInput(2, "ends").toInts();
  std::vector<int64_t> axes, steps;
  if (n.hasInput(3))
    axes = n.requireConstInput(3, "axes").toInts();
  else
    for (size_t i = 0; i < starts.size(); ++i)
      axes.push_back(i);
  if (n.hasInput(4))
    steps = n.requireConstInput(4, "steps").toInts();
  else
    steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
    n.fail("starts, ends, axes and steps differ in length");
  std::vector<int64_t> lo(rank, 0), hi(in), st(rank, 1);
  std::vector<std::pair<int64_t, std::vector<int64_t>>> descending;
  for (size_t i = 0; i < starts.size(); ++i) {
    int64_t axis = n.normalizeAxis(axes[i], rank), dim = in[axis];
    if (steps[i] == 0)
      n.fail("a step of 0 is not allowed");
    if (steps[i] < 0) {
      descending.emplace_back(axis, descendingIndices(starts[i], ends[i], steps[i], dim));
      if (descending.back().second.empty())
        n.fail("slice produces an empty tensor, which cpc does not support");
      continue;
    }
    int64_t s = starts[i] < 0 ? starts[i] + dim : starts[i];
    int64_t e = ends[i] < 0 ? ends[i] + dim : ends[i];
    lo[axis] = std::clamp<int64_t>(s, 0, dim);
    hi[axis] = std::clamp<int64_t>(e, lo[axis], dim);
    st[axis] = steps[i];
  }
  ImportedValue x = n.inputValue(0);
  if (lo != std::vector<int64_t>(rank, 0) || hi != in || st != std::vector<int64_t>(rank, 1)) {
    if (foldable(n)) {
      x = n.imported(n.constInput(0)->slice(lo, hi, st));
    } else {
      for (int64_t d = 0; d < rank; ++d)
        if (hi[d] == lo[d])
          n.fail("slice produces an empty tensor, which cpc does not support");
      x = n.imported(n.emit1<SliceOp>({n.input(0)}, {n.namedI64s("starts", lo), n.namedI64s("limits", hi),
                                                     n.namedI64s("strides", st)}));
    }
  }
  for (const auto &[axis, indices] : descending)
    x = gatherAlong(n, x, axis, indices);
  n.setOutput(0, x);
}

void importGather(NodeImporter &n) {
  std::vector<int64_t> in = n.inputShape(0);
  int64_t axis = n.normalizeAxis(n.attrInt("axis", 0), in.size());
  if (foldable(n) && n.constInput(1)) {
    n.setOutput(0, n.constInput(0)->gather(*n.constInput(1), axis));
    return;
  }
  if (const ConstTensor *idx = n.constInput(1))
    for (int64_t i = 0; i < idx->numElements(); ++i)
      if (idx->getInt(i) < -in[axis] || idx->getInt(i) >= in[axis])
        n.fail("index " + std::to_string(idx->getInt(i)) + " out of range for dim of size " +
               std::to_string(in[axis]));
  n.setOutput(0, n.emit1<GatherOp>({n.input(0), n.input(1)}, {n.namedI64("axis", axis)}));
}

/// GatherND (batch_dims 0) with constant indices [..., k]: data's first k dims flattened into one,
/// a Gather of the flat positions along it, reshaped to indices[:-1] + data[k:] (torch's
/// x[idx_a, idx_b] and table[index] as the dynamo exporter writes them).
void importGatherND(NodeImporter &n) {
  std::vector<int64_t> data = n.inputShape(0);
  if (n.attrInt("batch_dims", 0) != 0)
    n.fail("batch_dims other than 0 is not supported");
  const ConstTensor &indices = n.requireConstInput(1, "indices");
  std::vector<int64_t> ishape = indices.shape();
  int64_t k = ishape.empty() ? 0 : ishape.back();
  if (ishape.empty() || k < 1 || k > (int64_t)data.size())
    n.fail("indices of shape " + shapeToString(ishape) + " do not index a tensor of rank " +
           std::to_string(data.size()));
  int64_t count = indices.numElements() / k, rows = 1;
  for (int64_t d = 0; d < k; ++d)
    rows *= data[d];
  std::vector<int64_t> flat(count);
  for (int64_t i = 0; i < count; ++i)
    for (int64_t d = 0; d < k; ++d) {
      int64_t index = indices.getInt(i * k + d);
      if (index < -data[d] || index >= data[d])
        n.fail("index " + std::to_string(index) + " out of range for dim " + std::to_string(d) + " of size " +
               std::to_string(data[d]));
      flat[i] = flat[i] * data[d] + (index < 0 ? index + data[d] : index);
    }
  std::vector<int64_t> table{rows}, out(ishape.begin(), ishape.end() - 1);
  table.insert(table.end(), data.begin() + k, data.end());
  out.insert(out.end(), data.begin() + k, data.end());
  ConstTensor positions = ConstTensor::fromInts(flat, {count});
  if (const ConstTensor *c = n.constInput(0)) {
    n.setOutput(0, c->reshaped(table).gather(positions, 0).reshaped(out));
    return;
  }
  Value picked = n.emit1<GatherOp>({n.reshape(n.input(0), table), n.constant(positions)}, {n.namedI64("axis", 0)});
  n.setOutput(0, n.reshape(picked, out));
}

void importExpand(NodeImporter &n) {
  std::vector<int64_t> in = n.inputShape(0);
  std::vector<int64_t> target = n.requireConstInput(1, "shape").toInts();
  // ONNX Expand broadcasts both ways: a 1 in the target keeps the input dim.
  size_t rank = std::max(in.size(), target.size());
  std::vector<int64_t> out(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t a = i < rank - in.size() ? 1 : in[i - (rank - in.size())];
    int64_t b = i < rank - target.size() ? 1 : target[i - (rank - target.size())];
    if (a != b && a != 1 && b != 1)
      n.fail("cannot expand " + shapeToString(in) + " to " + shapeToString(target));
    out[i] = a == 1 ? b : a;
  }
  if (foldable(n) && numElementsOf(out) <= kMaxFoldElements) {
    n.setOutput(0, n.constInput(0)->broadcastTo(out));
    return;
  }
  Value x = n.input(0);
  auto type = RankedTensorType::get(out, n.inputType(0).getElementType());
  n.setOutput(0, type == x.getType() ? x : n.emitTyped<BroadcastOp>(type, {x}));
}

/// Tile(x, r) = reshape(broadcast(reshape(x, [1,d0,1,d1,...]), [r0,d0,r1,d1,...]), [r0*d0, ...]).
void importTile(NodeImporter &n) {
  std::vector<int64_t> in = n.inputShape(0);
  std::vector<int64_t> repeats = n.requireConstInput(1, "repeats").toInts();
  if (repeats.size() != in.size())
    n.fail("repeats has " + std::to_string(repeats.size()) + " entries for rank " + std::to_string(in.size()));
  std::vector<int64_t> interleaved, expanded, out;
  for (size_t d = 0; d < in.size(); ++d) {
    if (repeats[d] < 1)
      n.fail("repeats must be >= 1");
    interleaved.insert(interleaved.end(), {1, in[d]});
    expanded.insert(expanded.end(), {repeats[d], in[d]});
    auto tiled = checkedMul(repeats[d], in[d]);
    if (!tiled)
      n.fail("repeats " + shapeToString(repeats) + " overflow the dims of " + shapeToString(in));
    out.push_back(*tiled);
  }
  if (foldable(n) && numElementsOf(out) <= kMaxFoldElements) {
    n.setOutput(0, n.constInput(0)->reshaped(interleaved).broadcastTo(expanded).reshaped(out));
    return;
  }
  if (out == in) {
    n.setOutput(0, n.input(0));
    return;
  }
  Value x = n.reshape(n.input(0), interleaved);
  auto et = n.inputType(0).getElementType();
  x = n.emitTyped<BroadcastOp>(RankedTensorType::get(expanded, et), {x});
  n.setOutput(0, n.reshape(x, out));
}

void importRange(NodeImporter &n) {
  const ConstTensor &start = n.requireConstScalar(0, "start");
  const ConstTensor &limit = n.requireConstScalar(1, "limit");
  const ConstTensor &delta = n.requireConstScalar(2, "delta");
  double s = start.getDouble(0), l = limit.getDouble(0), d = delta.getDouble(0);
  if (d == 0)
    n.fail("delta is zero");
  // Range is always folded on the host: bound its length (and keep the cast below defined).
  constexpr int64_t kMaxRangeElements = int64_t(1) << 24;
  double steps = std::ceil((l - s) / d);
  if (!(steps <= (double)kMaxRangeElements)) // also NaN
    n.fail("start, limit and delta give more than " + std::to_string(kMaxRangeElements) + " values");
  int64_t count = std::max<int64_t>(0, (int64_t)steps);
  std::vector<double> values(count);
  for (int64_t i = 0; i < count; ++i)
    values[i] = s + i * d;
  n.setOutput(0, ConstTensor::fromDoubles(values, {count}, start.type()));
}

} // namespace

void checkSplitSizes(NodeImporter &n, const std::vector<int64_t> &sizes, int64_t dim) {
  int64_t total = 0;
  for (int64_t s : sizes) {
    if (s < 0)
      n.fail("split sizes must be >= 0");
    total += s;
  }
  if (total != dim)
    n.fail("split sizes " + shapeToString(sizes) + " add up to " + std::to_string(total) + ", not to dim " +
           std::to_string(dim));
}

namespace {
void importSplit(NodeImporter &n) {
  std::vector<int64_t> in = n.inputShape(0);
  int64_t axis = n.normalizeAxis(n.attrInt("axis", 0), in.size());
  int64_t outputs = n.node().output_size();
  std::vector<int64_t> sizes;
  if (n.hasInput(1))
    sizes = n.requireConstInput(1, "split").toInts();
  else if (n.hasAttr("split"))
    sizes = n.attrInts("split");
  else if (n.hasAttr("num_outputs")) { // opset 18: equal chunks, the last one smaller
    if (n.attrInt("num_outputs") != outputs || outputs < 1)
      n.fail("num_outputs " + std::to_string(n.attrInt("num_outputs")) + " but the node has " +
             std::to_string(outputs) + " outputs");
    int64_t chunk = (in[axis] + outputs - 1) / outputs;
    for (int64_t i = 0; i < outputs; ++i)
      sizes.push_back(std::clamp<int64_t>(in[axis] - i * chunk, 0, chunk));
  } else {
    if (in[axis] % outputs)
      n.fail("dim " + std::to_string(in[axis]) + " does not split evenly into " + std::to_string(outputs));
    sizes.assign(outputs, in[axis] / outputs);
  }
  if ((int64_t)sizes.size() != outputs)
    n.fail("split sizes do not match the number of outputs");
  checkSplitSizes(n, sizes, in[axis]);
  int64_t offset = 0;
  for (int64_t i = 0; i < outputs; ++i) {
    std::vector<int64_t> lo(in.size(), 0), hi(in), st(in.size(), 1);
    lo[axis] = offset;
    hi[axis] = offset + sizes[i];
    offset += sizes[i];
    if (hi[axis] > in[axis])
      n.fail("split sizes exceed the dim");
    if (foldable(n))
      n.setOutput(i, n.constInput(0)->slice(lo, hi, st));
    else
      n.setOutput(i, n.emit1<SliceOp>({n.input(0)}, {n.namedI64s("starts", lo), n.namedI64s("limits", hi),
                                                     n.namedI64s("strides", st)}));
  }
}

/// The source position along a dim of `size` of each of the begin + size + end positions a Pad
/// in `mode` (edge, reflect or wrap) writes: numpy's rules, reflect and wrap periodic.
std::vector<int64_t> padSourcePositions(const std::string &mode, int64_t begin, int64_t size, int64_t end) {
  std::vector<int64_t> at;
  for (int64_t i = -begin; i < size + end; ++i) {
    if (mode == "edge") {
      at.push_back(std::clamp<int64_t>(i, 0, size - 1));
    } else if (mode == "wrap") {
      at.push_back(((i % size) + size) % size);
    } else { // reflect about the first and last element, which are not repeated
      int64_t period = 2 * (size - 1);
      int64_t m = period ? ((i % period) + period) % period : 0;
      at.push_back(m < size ? m : period - m);
    }
  }
  return at;
}

/// Pad with constant pads: in constant mode concatenates fill blocks dim by dim, in edge,
/// reflect and wrap modes gathers each dim's source positions (so the gradient is Gather's);
/// negative pads slice.
void importPad(NodeImporter &n) {
  std::string mode = n.attrString("mode", "constant");
  if (mode != "constant" && mode != "edge" && mode != "reflect" && mode != "wrap")
    n.fail("mode '" + mode + "' is not one of constant, edge, reflect, wrap");
  if (mode == "wrap" && n.opset() < 19)
    n.fail("mode 'wrap' needs opset 19");
  std::vector<int64_t> in = n.inputShape(0);
  int64_t rank = in.size();
  std::vector<int64_t> pads = n.requireConstInput(1, "pads").toInts();
  std::vector<int64_t> axes;
  if (n.hasInput(3))
    axes = n.requireConstInput(3, "axes").toInts();
  else
    for (int64_t d = 0; d < rank; ++d)
      axes.push_back(d);
  if (pads.size() != 2 * axes.size())
    n.fail("pads must hold a begin and an end per axis");
  Value x = n.input(0);
  Type et = n.inputType(0).getElementType();
  Value fill;
  if (n.hasInput(2)) {
    const ConstTensor &value = n.requireConstScalar(2, "constant_value");
    fill = llvm::isa<FloatType>(et) ? n.scalar(value.getDouble(0), et) : n.intScalar(value.getInt(0), et);
  } else {
    fill = n.scalar(0.0, et);
  }
  std::vector<int64_t> shape = in;
  for (size_t i = 0; i < axes.size(); ++i) {
    int64_t axis = n.normalizeAxis(axes[i], rank);
    int64_t begin = pads[i], end = pads[i + axes.size()];
    if (begin < 0 || end < 0) { // negative pads crop
      std::vector<int64_t> lo(rank, 0), hi(shape), st(rank, 1);
      lo[axis] = std::max<int64_t>(0, -begin);
      hi[axis] = shape[axis] - std::max<int64_t>(0, -end);
      if (hi[axis] <= lo[axis])
        n.fail("negative pads remove the whole dim");
      x = n.emit1<SliceOp>({x}, {n.namedI64s("starts", lo), n.namedI64s("limits", hi), n.namedI64s("strides", st)});
      shape[axis] = hi[axis] - lo[axis];
      begin = std::max<int64_t>(0, begin);
      end = std::max<int64_t>(0, end);
    }
    if (begin == 0 && end == 0)
      continue;
    if (mode != "constant") {
      if (mode == "reflect" && shape[axis] == 1)
        n.fail("reflect padding needs a dim of at least 2 elements, axis " + std::to_string(axis) + " has 1");
      std::vector<int64_t> positions = padSourcePositions(mode, begin, shape[axis], end);
      ConstTensor at = ConstTensor::fromInts(positions, {(int64_t)positions.size()});
      x = n.emit1<GatherOp>({x, n.constant(at)}, {n.namedI64("axis", axis)});
      shape[axis] += begin + end;
      continue;
    }
    SmallVector<Value> parts;
    auto block = [&](int64_t size) {
      std::vector<int64_t> bshape(shape);
      bshape[axis] = size;
      return n.emitTyped<BroadcastOp>(RankedTensorType::get(bshape, et), {fill});
    };
    if (begin)
      parts.push_back(block(begin));
    parts.push_back(x);
    if (end)
      parts.push_back(block(end));
    x = n.emit1<ConcatOp>(parts, {n.namedI64("axis", axis)});
    shape[axis] += begin + end;
  }
  n.setOutput(0, x);
}

/// ScatterElements(data, indices, updates, axis) as ScatterND: the index of element
/// (i0, .., ik) of `indices` is (i0, .., indices[i0..ik], .., ik).
void importScatterElements(NodeImporter &n) {
  std::vector<int64_t> idxShape = n.inputShape(1);
  int64_t rank = idxShape.size();
  int64_t axis = n.normalizeAxis(n.attrInt("axis", 0), rank);
  if ((int64_t)n.inputShape(0).size() != rank)
    n.fail("indices must have the rank of data");
  Type idxEt = n.inputType(1).getElementType();
  std::vector<int64_t> column(idxShape);
  column.push_back(1);
  SmallVector<Value> coords;
  for (int64_t d = 0; d < rank; ++d) {
    if (d == axis) {
      coords.push_back(n.reshape(n.input(1), column));
      continue;
    }
    ConstTensor iota(onnx::TensorProto_DataType_INT64, column);
    std::vector<int64_t> strides = stridesOf(column);
    for (int64_t i = 0; i < iota.numElements(); ++i)
      iota.set(i, (double)((i / strides[d]) % column[d]));
    Value c = n.constant(iota);
    if (!idxEt.isInteger(64))
      c = n.emitTyped<CastOp>(RankedTensorType::get(column, idxEt), {c});
    coords.push_back(c);
  }
  Value ndIndices = n.emit1<ConcatOp>(coords, {n.namedI64("axis", rank)});
  std::string reduction = n.attrString("reduction", "none");
  n.setOutput(0, n.emit1<ScatterNDOp>({n.input(0), ndIndices, n.input(2)}, {n.namedScatterReduction(reduction)}));
}

} // namespace

void registerShapeHandlers(HandlerRegistry &r) {
  r.add("Constant", importConstant, 1, kNewestOpset);
  r.add("Shape", importShape, 1, kNewestOpset);
  r.add("Size", importSize, 1, kNewestOpset);
  r.add("ConstantOfShape", importConstantOfShape, 1, kNewestOpset);
  r.add("Reshape", importReshape, 1, kNewestOpset);
  r.add("Unsqueeze", importUnsqueeze, 1, kNewestOpset);
  r.add("Squeeze", importSqueeze, 1, kNewestOpset);
  r.add("Flatten", importFlatten, 1, kNewestOpset);
  r.add("Transpose", importTranspose, 1, kNewestOpset);
  r.add("Concat", importConcat);
  r.add("Slice", importSlice);
  r.add("GatherND", importGatherND, 11, kNewestOpset);
  r.add("Gather", importGather);
  r.add("Expand", importExpand);
  r.add("Tile", importTile);
  r.add("Range", importRange);
  r.add("Split", importSplit, 1, kNewestOpset);
  r.add("Pad", importPad, 13, kNewestOpset);
  r.add("ScatterElements", importScatterElements, 13, kNewestOpset);
}

} // namespace cpc::onnx_import
