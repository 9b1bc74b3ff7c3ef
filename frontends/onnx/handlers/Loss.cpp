//===- Loss.cpp - ONNX LogSoftmax and classification losses -> cpc --------===//
//
// Decomposed into cpc ops (reduce_max, exp, log, gather_elements, ...) so that autodiff and
// sharding need no extra rules for them.
//
#include "frontends/onnx/NodeImporter.h"

using namespace mlir;

namespace cpc::onnx_import {
namespace {

/// log_softmax(x) along axis = (x - max) - log(sum(exp(x - max))). The max only keeps exp in
/// range: the result does not depend on it, so it gets no gradient (cpc.stop_gradient).
Value logSoftmax(NodeImporter &n, Value x, int64_t axis) {
  auto keep = [&](int64_t a) {
    return SmallVector<NamedAttribute>{n.namedI64s("axes", {a}), n.namedBool("keepdims", true)};
  };
  Value max = n.emit1<ReduceMaxOp>({x}, keep(axis));
  max = n.emitTyped<StopGradientOp>(max.getType(), {max});
  Value shifted = n.emit1<SubOp>({x, max});
  Value exp = n.emitTyped<ExpOp>(shifted.getType(), {shifted});
  Value sum = n.emit1<ReduceSumOp>({exp}, keep(axis));
  Value lse = n.emitTyped<LogOp>(sum.getType(), {sum});
  return n.emit1<SubOp>({shifted, lse});
}

void importLogSoftmax(NodeImporter &n) {
  if (!llvm::isa<FloatType>(n.inputType(0).getElementType()))
    n.fail("input must be floating point");
  int64_t axis = n.normalizeAxis(n.attrInt("axis", -1), n.inputShape(0).size());
  n.setOutput(0, logSoftmax(n, n.input(0), axis));
}

/// Negative log-likelihood of `logProb` [N, C, d...] at `labels` [N, d...], with ONNX's
/// reduction and ignore_index semantics (mean divides by the number of counted labels).
Value nllLoss(NodeImporter &n, Value logProb, size_t labelsInput) {
  auto lpType = llvm::cast<RankedTensorType>(logProb.getType());
  std::vector<int64_t> labelShape = n.inputShape(labelsInput);
  if (lpType.getRank() < 2 || (int64_t)labelShape.size() != lpType.getRank() - 1)
    n.fail("scores must be [N, C, ...] and labels [N, ...]");
  Type et = lpType.getElementType();
  Value labels = n.input(labelsInput);
  Type labelEt = n.inputType(labelsInput).getElementType();
  std::string reduction = n.attrString("reduction", "mean");
  if (reduction != "mean" && reduction != "sum" && reduction != "none")
    n.fail("reduction '" + reduction + "' is not supported");

  // Counted labels: those != ignore_index (all of them when the attribute is absent).
  Value counted;
  if (n.hasAttr("ignore_index")) {
    Value ignore = n.intScalar(n.attrInt("ignore_index"), labelEt);
    Value isIgnored = n.emit1<EqualOp>({labels, ignore});
    counted = n.emitTyped<NotOp>(isIgnored.getType(), {isIgnored});
    labels = n.emit1<WhereOp>({counted, labels, n.intScalar(0, labelEt)}); // keep gathers in range
  }
  std::vector<int64_t> indexShape(labelShape);
  indexShape.insert(indexShape.begin() + 1, 1);
  Value picked = n.emit1<GatherElementsOp>({logProb, n.reshape(labels, indexShape)}, {n.namedI64("axis", 1)});
  picked = n.reshape(picked, labelShape);
  Value loss = n.emitTyped<NegOp>(picked.getType(), {picked});
  // Per-label weights: the class weight of the label (when given) times whether it counts.
  Value weight;
  if (n.hasInput(labelsInput + 1)) {
    std::vector<int64_t> classWeightShape = n.inputShape(labelsInput + 1);
    if (classWeightShape.size() != 1 || classWeightShape[0] != lpType.getDimSize(1))
      n.fail("the class weights must be a vector of C elements");
    weight = n.emit1<GatherOp>({n.input(labelsInput + 1), labels}, {n.namedI64("axis", 0)});
  }
  if (counted) {
    Value countedWeight = n.emitTyped<CastOp>(RankedTensorType::get(labelShape, et), {counted});
    weight = weight ? n.emit1<MulOp>({weight, countedWeight}) : countedWeight;
  }
  if (weight)
    loss = n.emit1<MulOp>({loss, weight});
  if (reduction == "none")
    return loss;
  std::vector<int64_t> all;
  for (size_t d = 0; d < labelShape.size(); ++d)
    all.push_back(d);
  auto sumAll = [&](Value v) { return n.emit1<ReduceSumOp>({v}, {n.namedI64s("axes", all), n.namedBool("keepdims", false)}); };
  Value total = sumAll(loss);
  if (reduction == "sum")
    return total;
  Value count = weight ? sumAll(weight) : n.scalar((double)numElementsOf(labelShape), et);
  return n.emit1<DivOp>({total, count});
}

void importNegativeLogLikelihoodLoss(NodeImporter &n) {
  n.setOutput(0, nllLoss(n, n.input(0), 1));
}

void importSoftmaxCrossEntropyLoss(NodeImporter &n) {
  if (!llvm::isa<FloatType>(n.inputType(0).getElementType()))
    n.fail("scores must be floating point");
  Value logProb = logSoftmax(n, n.input(0), 1);
  n.setOutput(0, nllLoss(n, logProb, 1));
  n.setOutput(1, logProb);
}

} // namespace

void registerLossHandlers(HandlerRegistry &r) {
  r.add("LogSoftmax", importLogSoftmax, 13);
  r.add("NegativeLogLikelihoodLoss", importNegativeLogLikelihoodLoss, 13);
  r.add("SoftmaxCrossEntropyLoss", importSoftmaxCrossEntropyLoss, 13);
}

} // namespace cpc::onnx_import
