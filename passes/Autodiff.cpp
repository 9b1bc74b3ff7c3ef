//===- Autodiff.cpp - reverse-mode differentiation over the cpc dialect ---===//
#include "dialects/cpc/Roles.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/DenseSet.h"

namespace cpc {
#define GEN_PASS_DEF_CPCAUTODIFF
#include "passes/Passes.h.inc"
} // namespace cpc

using namespace mlir;
using namespace cpc;

namespace {

bool isFloatTensor(Value v) {
  auto t = llvm::dyn_cast<RankedTensorType>(v.getType());
  return t && llvm::isa<FloatType>(t.getElementType());
}

} // namespace

// Over 80 lines: activity analysis, the reverse walk and the gradient function's signature share the
// value-to-adjoint map; splitting them is planned with the function-level pass rework (issue 30, item 5).
/// Builds `@<name>_grad` from `@<name>`; returns failure after emitting a diagnostic. With a
/// `lossScale` (> 0) the backward starts from the loss-scale state instead of 1.
LogicalResult cpc::differentiate(func::FuncOp forward, double lossScale) {
  if (forward.getNumResults() < 1 || !isFloatTensor(forward.getBody().front().getTerminator()->getOperand(0)) ||
      llvm::cast<RankedTensorType>(forward.getResultTypes()[0]).getRank() != 0)
    return forward.emitError("the first result of @") << forward.getSymName() << " must be a scalar float loss";

  OpBuilder builder(forward);
  builder.setInsertionPointAfter(forward);
  auto grad = llvm::cast<func::FuncOp>(builder.clone(*forward));
  grad.setSymName((forward.getSymName() + "_grad").str());
  Block &body = grad.getBody().front();
  auto ret = llvm::cast<func::ReturnOp>(body.getTerminator());
  Value loss = ret.getOperand(0);

  // Activity: varied (depends on a trainable parameter) and useful (the loss depends on it).
  SmallVector<ParameterOp> params;
  llvm::DenseSet<Value> varied, useful;
  for (Operation &op : body) {
    if (auto p = llvm::dyn_cast<ParameterOp>(op)) {
      if (p.getTrainable()) {
        params.push_back(p);
        varied.insert(p);
      }
      continue;
    }
    bool anyVaried = llvm::any_of(op.getOperands(), [&](Value v) { return varied.contains(v); });
    auto vjp = llvm::dyn_cast<VJPOpInterface>(op);
    if (anyVaried && !(vjp && !vjp.hasDerivative()))
      for (Value r : op.getResults())
        if (isFloatTensor(r))
          varied.insert(r);
  }
  useful.insert(loss);
  for (Operation &op : llvm::reverse(body)) {
    if (llvm::any_of(op.getResults(), [&](Value r) { return useful.contains(r); }))
      for (Value v : op.getOperands())
        useful.insert(v);
  }
  auto active = [&](Value v) { return varied.contains(v) && useful.contains(v) && isFloatTensor(v); };

  // Reverse sweep, appending the backward ops before the return.
  builder.setInsertionPoint(ret);
  llvm::DenseMap<Value, Value> grads;
  auto lossType = llvm::cast<RankedTensorType>(loss.getType());
  if (lossScale > 0) {
    Value scale = readLossScale(builder, ret.getLoc(), lossScale);
    grads[loss] = scale.getType() == lossType ? scale : builder.create<CastOp>(ret.getLoc(), lossType, scale);
  } else {
    grads[loss] = builder.create<ConstantOp>(
        ret.getLoc(), DenseElementsAttr::get(lossType, builder.getFloatAttr(lossType.getElementType(), 1.0)));
  }
  SmallVector<Operation *> forwardOps;
  for (Operation &op : body)
    if (&op != ret.getOperation())
      forwardOps.push_back(&op);
  for (Operation *op : llvm::reverse(forwardOps)) {
    SmallVector<Value> resultGrads;
    bool anyGrad = false;
    for (Value r : op->getResults()) {
      Value g = active(r) ? grads.lookup(r) : Value();
      resultGrads.push_back(g);
      anyGrad |= bool(g);
    }
    if (!anyGrad)
      continue;
    SmallVector<bool> needGrad;
    for (Value v : op->getOperands())
      needGrad.push_back(active(v));
    if (llvm::none_of(needGrad, [](bool b) { return b; }))
      continue;
    auto vjp = llvm::dyn_cast<VJPOpInterface>(op);
    if (!vjp)
      return op->emitError("has no gradient rule, but a trainable parameter's gradient flows through it");
    builder.setInsertionPoint(ret);
    Operation *before = ret->getPrevNode();
    SmallVector<Value> operandGrads;
    if (failed(vjp.buildVJP(builder, resultGrads, needGrad, operandGrads)))
      return failure();
    if (operandGrads.size() != op->getNumOperands())
      return op->emitError("gradient rule returned ") << operandGrads.size() << " gradients for "
                                                      << op->getNumOperands() << " operands";
    for (auto [operand, g, need] : llvm::zip(op->getOperands(), operandGrads, needGrad)) {
      if (!need)
        continue;
      if (!g)
        return op->emitError("gradient rule gave no gradient for an operand that needs one");
      if (g.getType() != operand.getType())
        return op->emitError("gradient rule produced ") << g.getType() << " for an operand of type "
                                                        << operand.getType();
      Value &slot = grads[operand];
      slot = slot ? builder.create<AddOp>(op->getLoc(), slot, g).getResult() : g;
    }
    // The gradient's ops are backward, in the pipeline chunk and recompute segment of their
    // forward op.
    SmallVector<NamedAttribute> labels;
    for (StringRef label : kPlacementLabels)
      if (Attribute value = op->getAttr(label))
        labels.push_back(builder.getNamedAttr(label, value));
    if (!labels.empty())
      for (Operation *created = before ? before->getNextNode() : &body.front(); created != ret.getOperation();
           created = created->getNextNode()) {
        created->setAttr(kBackwardAttrName, builder.getUnitAttr());
        for (NamedAttribute label : labels)
          created->setAttr(label.getName(), label.getValue());
      }
  }

  // Results: the loss, then one gradient per trainable parameter (zeros when unused).
  SmallVector<Value> results{loss};
  for (ParameterOp p : params) {
    Value g = grads.lookup(p.getResult());
    if (!g) {
      auto type = p.getType();
      Value zero = builder.create<ConstantOp>(
          p.getLoc(), DenseElementsAttr::get(RankedTensorType::get({}, type.getElementType()),
                                             builder.getFloatAttr(type.getElementType(), 0.0)));
      g = builder.create<BroadcastOp>(p.getLoc(), type, zero);
    }
    results.push_back(g);
  }
  builder.create<func::ReturnOp>(ret.getLoc(), results);
  ret.erase();
  SmallVector<DictionaryAttr> resultAttrs;
  resultAttrs.push_back(builder.getDictionaryAttr({builder.getNamedAttr("cpc.name", builder.getStringAttr("loss"))}));
  for (ParameterOp p : params)
    resultAttrs.push_back(builder.getDictionaryAttr(
        {builder.getNamedAttr("cpc.name", builder.getStringAttr("grad." + p.getName().str())),
         builder.getNamedAttr("cpc.grad_of", builder.getStringAttr(p.getName()))}));
  grad.setFunctionType(builder.getFunctionType(grad.getArgumentTypes(), ValueRange(results).getTypes()));
  grad.setAllResultAttrs(resultAttrs);
  return success();
}

namespace {

struct CpcAutodiffPass : cpc::impl::CpcAutodiffBase<CpcAutodiffPass> {
  using CpcAutodiffBase::CpcAutodiffBase;
  void runOnOperation() override {
    auto func = getOperation().lookupSymbol<func::FuncOp>(funcName);
    if (!func) {
      getOperation().emitError("no function @") << funcName << " to differentiate";
      return signalPassFailure();
    }
    if (lossScale < 0) {
      getOperation().emitError("loss-scale must be >= 0 (0: no loss scaling)");
      return signalPassFailure();
    }
    if (failed(differentiate(func, lossScale)))
      signalPassFailure();
  }
};

} // namespace
