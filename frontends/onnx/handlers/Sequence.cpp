//===- Sequence.cpp - ONNX sequence ops, resolved at import ---------------===//
//
// The torch.onnx exporter writes torch.split / chunk / unbind as SplitToSequence followed by
// SequenceAt at constant positions. A sequence is kept as the list of its elements during
// import, so what reaches the IR is the slices themselves.
//
#include "frontends/onnx/NodeImporter.h"

using namespace mlir;

namespace cpc::onnx_import {
namespace {

/// input[lo:hi] along `axis`, with the axis dropped when !keepdims (then hi == lo + 1).
ImportedValue sliceAlong(NodeImporter &n, int64_t axis, int64_t lo, int64_t hi, bool keepdims) {
  std::vector<int64_t> in = n.inputShape(0);
  std::vector<int64_t> starts(in.size(), 0), limits(in), strides(in.size(), 1);
  starts[axis] = lo;
  limits[axis] = hi;
  std::vector<int64_t> squeezed = in;
  squeezed[axis] = hi - lo;
  if (!keepdims)
    squeezed.erase(squeezed.begin() + axis);
  if (const ConstTensor *c = n.constInput(0); c && c->numElements() <= kMaxFoldElements)
    return n.imported(c->slice(starts, limits, strides).reshaped(squeezed));
  Value part = n.emit1<SliceOp>({n.input(0)}, {n.namedI64s("starts", starts), n.namedI64s("limits", limits),
                                               n.namedI64s("strides", strides)});
  return n.imported(keepdims ? part : n.reshape(part, squeezed));
}

/// The sizes SplitToSequence cuts `dim` into: its `split` input (a chunk size, or one size per
/// part) or, without it, parts of one element.
std::vector<int64_t> sequenceSplitSizes(NodeImporter &n, int64_t dim) {
  std::vector<int64_t> sizes;
  if (!n.hasInput(1)) {
    sizes.assign(dim, 1);
    return sizes;
  }
  const ConstTensor &split = n.requireConstInput(1, "split");
  if (split.shape().empty()) {
    int64_t chunk = split.getInt(0);
    if (chunk <= 0)
      n.fail("split size " + std::to_string(chunk) + " must be > 0");
    for (int64_t at = 0; at < dim; at += chunk)
      sizes.push_back(std::min(chunk, dim - at));
    return sizes;
  }
  sizes = split.toInts();
  checkSplitSizes(n, sizes, dim);
  return sizes;
}

void importSplitToSequence(NodeImporter &n) {
  std::vector<int64_t> in = n.inputShape(0);
  int64_t axis = n.normalizeAxis(n.attrInt("axis", 0), in.size());
  bool keepdims = n.attrInt("keepdims", 1) != 0 || n.hasInput(1); // keepdims applies without `split` only
  std::vector<int64_t> sizes = sequenceSplitSizes(n, in[axis]);
  ImportedSequence parts;
  int64_t offset = 0;
  for (int64_t size : sizes) {
    parts.push_back(sliceAlong(n, axis, offset, offset + size, keepdims));
    offset += size;
  }
  ImportedValue out;
  out.sequence = std::make_shared<const ImportedSequence>(std::move(parts));
  n.setOutput(0, out);
}

void importSequenceAt(NodeImporter &n) {
  const ImportedSequence &sequence = n.inputSequence(0);
  int64_t position = n.requireConstScalar(1, "position").getInt(0);
  int64_t count = sequence.size();
  if (position < -count || position >= count)
    n.fail("position " + std::to_string(position) + " is outside a sequence of " + std::to_string(count));
  n.setOutput(0, sequence[position < 0 ? position + count : position]);
}

void importSequenceConstruct(NodeImporter &n) {
  ImportedSequence elements;
  for (size_t i = 0; i < n.numInputs(); ++i) {
    n.inputType(i); // a tensor, not a sequence
    elements.push_back(n.inputValue(i));
  }
  ImportedValue out;
  out.sequence = std::make_shared<const ImportedSequence>(std::move(elements));
  n.setOutput(0, out);
}

void importSequenceLength(NodeImporter &n) {
  n.setOutput(0, ConstTensor::fromInts({(int64_t)n.inputSequence(0).size()}, {}));
}

} // namespace

void registerSequenceHandlers(HandlerRegistry &r) {
  r.add("SplitToSequence", importSplitToSequence, 11, kNewestOpset);
  r.add("SequenceAt", importSequenceAt, 11, kNewestOpset);
  r.add("SequenceConstruct", importSequenceConstruct, 11, kNewestOpset);
  r.add("SequenceLength", importSequenceLength, 11, kNewestOpset);
}

} // namespace cpc::onnx_import
