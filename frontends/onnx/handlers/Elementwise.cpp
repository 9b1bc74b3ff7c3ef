//===- Elementwise.cpp - ONNX elementwise ops -> cpc ----------------------===//
#include "frontends/onnx/NodeImporter.h"

#include <cmath>

using namespace mlir;

namespace cpc::onnx_import {
namespace {

using BinaryFold = double (*)(double, double);

double divide(double x, double y) { return x / y; }

/// A two-input broadcasting op: folded on the host when both inputs are constants.
template <typename OpT>
Handler binary(BinaryFold fold, bool boolResult = false) {
  return [fold, boolResult](NodeImporter &n) {
    if (n.numInputs() != 2)
      n.fail("expects 2 inputs");
    if (n.allInputsConstant() && fold) {
      const ConstTensor &a = *n.constInput(0), &b = *n.constInput(1);
      auto type = boolResult ? onnx::TensorProto_DataType_BOOL : a.type();
      bool intDiv = !a.isFloat() && fold == &divide;
      if (intDiv)
        n.setOutput(0, ConstTensor::broadcastBinary(a, b, type, [](double x, double y) {
          if (y == 0)
            throw std::runtime_error("integer division by zero in a constant");
          return std::trunc(x / y);
        }));
      else
        n.setOutput(0, ConstTensor::broadcastBinary(a, b, type, fold));
      return;
    }
    Value lhs = n.input(0), rhs = n.input(1);
    // Pow may take an exponent of another type; cpc wants one element type.
    if (lhs.getType() != rhs.getType() &&
        llvm::cast<RankedTensorType>(lhs.getType()).getElementType() !=
            llvm::cast<RankedTensorType>(rhs.getType()).getElementType()) {
      auto rt = llvm::cast<RankedTensorType>(rhs.getType());
      auto et = llvm::cast<RankedTensorType>(lhs.getType()).getElementType();
      rhs = n.emitTyped<CastOp>(RankedTensorType::get(rt.getShape(), et), {rhs});
    }
    n.setOutput(0, n.emit1<OpT>({lhs, rhs}));
  };
}

template <typename OpT>
Handler unary(double (*fold)(double)) {
  return [fold](NodeImporter &n) {
    if (fold && n.allInputsConstant()) {
      const ConstTensor &a = *n.constInput(0);
      n.setOutput(0, a.map(a.type(), fold));
      return;
    }
    Value x = n.input(0);
    n.setOutput(0, n.emitTyped<OpT>(x.getType(), {x}));
  };
}

/// Max/Min/Sum take any number of inputs: fold them pairwise.
template <typename OpT>
Handler variadic(BinaryFold fold) {
  return [fold](NodeImporter &n) {
    if (n.allInputsConstant()) {
      ConstTensor acc = *n.constInput(0);
      for (size_t i = 1; i < n.numInputs(); ++i)
        acc = ConstTensor::broadcastBinary(acc, *n.constInput(i), acc.type(), fold);
      n.setOutput(0, acc);
      return;
    }
    Value acc = n.input(0);
    for (size_t i = 1; i < n.numInputs(); ++i)
      acc = n.emit1<OpT>({acc, n.input(i)});
    n.setOutput(0, acc);
  };
}

void importCast(NodeImporter &n) {
  auto to = (onnx::TensorProto_DataType)n.attrInt("to");
  Type et = n.elementType(to);
  if (const ConstTensor *c = n.constInput(0)) {
    n.setOutput(0, c->cast(to));
    return;
  }
  Value x = n.input(0);
  auto type = RankedTensorType::get(n.inputType(0).getShape(), et);
  n.setOutput(0, type == x.getType() ? x : n.emitTyped<CastOp>(type, {x}));
}

void importIdentity(NodeImporter &n) {
  if (const ConstTensor *c = n.constInput(0))
    n.setOutput(0, *c);
  else
    n.setOutput(0, n.input(0));
}

/// Dropout is the identity at inference and at ratio 0; a random mask is not supported.
void importDropout(NodeImporter &n) {
  double ratio = n.hasInput(1) ? n.requireConstScalar(1, "ratio").getDouble(0) : n.attrFloat("ratio", 0.5);
  bool training = n.hasInput(2) && n.requireConstScalar(2, "training_mode").getInt(0) != 0;
  if (training && ratio > 0)
    n.fail("dropout in training mode (ratio " + std::to_string(ratio) +
           ") is not supported; export with ratio 0 or in eval mode");
  importIdentity(n);
  if (n.node().output_size() > 1 && !n.node().output(1).empty()) {
    ConstTensor ones(onnx::TensorProto_DataType_BOOL, n.inputShape(0));
    ones = ones.map(onnx::TensorProto_DataType_BOOL, [](double) { return 1.0; });
    n.setOutput(1, n.constant(ones));
  }
}

void importWhere(NodeImporter &n) {
  if (n.allInputsConstant()) {
    const ConstTensor &c = *n.constInput(0), &a = *n.constInput(1), &b = *n.constInput(2);
    auto any = [](double, double) { return 0.0; };
    std::vector<int64_t> shape =
        ConstTensor::broadcastBinary(ConstTensor::broadcastBinary(c, a, a.type(), any), b, a.type(), any).shape();
    ConstTensor cond = c.broadcastTo(shape), onFalse = b.broadcastTo(shape);
    ConstTensor out = a.broadcastTo(shape);
    for (int64_t i = 0; i < out.numElements(); ++i)
      if (!cond.getInt(i))
        out.set(i, onFalse.getDouble(i));
    n.setOutput(0, out);
    return;
  }
  n.setOutput(0, n.emit1<WhereOp>({n.input(0), n.input(1), n.input(2)}));
}

void importNot(NodeImporter &n) {
  if (const ConstTensor *c = n.constInput(0)) {
    n.setOutput(0, c->map(c->type(), [](double v) { return v == 0 ? 1.0 : 0.0; }));
    return;
  }
  Value x = n.input(0);
  n.setOutput(0, n.emitTyped<NotOp>(x.getType(), {x}));
}

/// Clip(x, min?, max?) = min(max(x, lo), hi); bounds are optional inputs (opset >= 11).
void importClip(NodeImporter &n) {
  if (n.allInputsConstant()) {
    ConstTensor x = *n.constInput(0);
    auto bound = [&](size_t i, auto pick) {
      if (n.hasInput(i))
        x = ConstTensor::broadcastBinary(x, *n.constInput(i), x.type(), pick);
    };
    bound(1, [](double a, double b) { return std::max(a, b); });
    bound(2, [](double a, double b) { return std::min(a, b); });
    n.setOutput(0, x);
    return;
  }
  Value x = n.input(0);
  if (n.hasInput(1))
    x = n.emit1<MaxOp>({x, n.input(1)});
  if (n.hasInput(2))
    x = n.emit1<MinOp>({x, n.input(2)});
  n.setOutput(0, x);
}

} // namespace

void registerElementwiseHandlers(HandlerRegistry &r) {
  r.add("Add", binary<AddOp>([](double a, double b) { return a + b; }));
  r.add("Sub", binary<SubOp>([](double a, double b) { return a - b; }));
  r.add("Mul", binary<MulOp>([](double a, double b) { return a * b; }));
  r.add("Div", binary<DivOp>(divide));
  r.add("Pow", [pow = binary<PowOp>([](double a, double b) { return std::pow(a, b); })](NodeImporter &n) {
    // cpc.pow is defined on floating-point tensors only; integer powers fold when constant.
    if (!n.allInputsConstant() && !llvm::isa<FloatType>(n.inputType(0).getElementType()))
      n.fail("Pow with an integer base is not supported");
    pow(n);
  });
  r.add("Equal", binary<EqualOp>([](double a, double b) { return double(a == b); }, true));
  r.add("Less", binary<LessOp>([](double a, double b) { return double(a < b); }, true));
  r.add("LessOrEqual", binary<LessEqualOp>([](double a, double b) { return double(a <= b); }, true));
  r.add("Greater", binary<GreaterOp>([](double a, double b) { return double(a > b); }, true));
  r.add("GreaterOrEqual", binary<GreaterEqualOp>([](double a, double b) { return double(a >= b); }, true));
  r.add("And", binary<AndOp>([](double a, double b) { return double(a != 0 && b != 0); }, true));
  r.add("Or", binary<OrOp>([](double a, double b) { return double(a != 0 || b != 0); }, true));
  r.add("Max", variadic<MaxOp>([](double a, double b) { return std::max(a, b); }));
  r.add("Min", variadic<MinOp>([](double a, double b) { return std::min(a, b); }));
  r.add("Sum", variadic<AddOp>([](double a, double b) { return a + b; }));

  r.add("Neg", unary<NegOp>([](double x) { return -x; }));
  r.add("Abs", unary<AbsOp>([](double x) { return std::abs(x); }));
  r.add("Exp", unary<ExpOp>([](double x) { return std::exp(x); }));
  r.add("Log", unary<LogOp>([](double x) { return std::log(x); }));
  r.add("Sqrt", unary<SqrtOp>([](double x) { return std::sqrt(x); }));
  r.add("Reciprocal", unary<ReciprocalOp>([](double x) { return 1.0 / x; }));
  r.add("Erf", unary<ErfOp>([](double x) { return std::erf(x); }));
  r.add("Tanh", unary<TanhOp>([](double x) { return std::tanh(x); }));
  r.add("Sigmoid", unary<SigmoidOp>([](double x) { return 1.0 / (1.0 + std::exp(-x)); }));
  r.add("Relu", unary<ReluOp>([](double x) { return std::max(x, 0.0); }));
  r.add("Not", importNot);
  r.add("Cast", importCast);
  r.add("Identity", importIdentity);
  r.add("Dropout", importDropout);
  r.add("Where", importWhere);
  r.add("Clip", importClip, 11);
}

} // namespace cpc::onnx_import
