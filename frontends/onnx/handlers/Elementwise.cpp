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

/// CastLike(x, like): Cast to the element type of `like`.
void importCastLike(NodeImporter &n) {
  Type et = n.inputType(1).getElementType();
  if (const ConstTensor *c = n.constInput(0)) {
    const ConstTensor *like = n.constInput(1);
    if (like) {
      n.setOutput(0, c->cast(like->type()));
      return;
    }
  }
  Value x = n.input(0);
  auto type = RankedTensorType::get(n.inputType(0).getShape(), et);
  n.setOutput(0, type == x.getType() ? x : n.emitTyped<CastOp>(type, {x}));
}

void importIdentity(NodeImporter &n) {
  n.setOutput(0, n.inputValue(0)); // sequences too (Identity-14)
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

/// Trilu: the upper (j - i >= k) or lower (j - i <= k) triangle of the last two dims, the rest
/// zero. Folded for a constant (a causal mask); otherwise where(constant mask, x, 0), which
/// brings where's gradient and sharding along.
void importTrilu(NodeImporter &n) {
  std::vector<int64_t> shape = n.inputShape(0);
  if (shape.size() < 2)
    n.fail("input must have rank >= 2, got rank " + std::to_string(shape.size()));
  int64_t k = n.hasInput(1) ? n.requireConstInput(1, "k").toInts().at(0) : 0;
  bool upper = n.attrInt("upper", 1) != 0;
  int64_t rows = shape[shape.size() - 2], cols = shape.back();
  std::vector<int64_t> keep(rows * cols);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j)
      keep[i * cols + j] = upper ? j - i >= k : j - i <= k;
  ConstTensor mask = ConstTensor::fromInts(keep, {rows, cols}, onnx::TensorProto_DataType_BOOL);
  if (const ConstTensor *x = n.constInput(0)) {
    ConstTensor out = x->broadcastTo(shape), full = mask.broadcastTo(shape);
    for (int64_t i = 0; i < out.numElements(); ++i)
      if (!full.getInt(i))
        out.set(i, 0);
    n.setOutput(0, out);
    return;
  }
  Value x = n.input(0);
  Type et = n.inputType(0).getElementType();
  Value zero = llvm::isa<FloatType>(et) ? n.scalar(0, et) : n.intScalar(0, et);
  n.setOutput(0, n.emit1<WhereOp>({n.constant(mask), x, zero}));
}

/// Mod at run time: a - trunc(a / b) * b, the quotient truncated by the integer division or, for
/// floats, by a round trip through int64 (exact below 2^63); with fmod = 0 (integers) a remainder
/// whose sign differs from the divisor's moves by b, as Python's %. The truncated quotient takes
/// no gradient (a cast and an integer division have none): d/da = 1, d/db = -trunc(a / b).
Value runtimeMod(NodeImporter &n, bool cStyle) {
  Value a = n.input(0), b = n.input(1);
  Type et = n.inputType(0).getElementType();
  if (et != n.inputType(1).getElementType())
    n.fail("the operands' element types differ");
  Value quotient = n.emit1<DivOp>({a, b});
  if (llvm::isa<FloatType>(et)) {
    auto shape = llvm::cast<RankedTensorType>(quotient.getType()).getShape();
    Value whole = n.emitTyped<CastOp>(RankedTensorType::get(shape, n.builder().getI64Type()), {quotient});
    quotient = n.emitTyped<CastOp>(RankedTensorType::get(shape, et), {whole});
  }
  Value r = n.emit1<SubOp>({a, n.emit1<MulOp>({quotient, b})});
  if (cStyle)
    return r;
  Value zero = n.scalar(0, et);
  Value wrongSign = n.emit1<WhereOp>({n.emit1<LessOp>({b, zero}), n.emit1<GreaterOp>({r, zero}), n.emit1<LessOp>({r, zero})});
  return n.emit1<WhereOp>({wrongSign, n.emit1<AddOp>({r, b}), r});
}

/// Mod (fmod = 0: the remainder takes the divisor's sign, as Python's %; fmod = 1: C's fmod):
/// folded for compile-time constants (the shape arithmetic of exports such as Swin's window
/// partition), else computed at run time.
void importMod(NodeImporter &n) {
  if (n.numInputs() != 2)
    n.fail("expects 2 inputs");
  bool cStyle = n.attrInt("fmod", 0) != 0;
  if (!cStyle && llvm::isa<FloatType>(n.inputType(0).getElementType()))
    n.fail("fmod = 0 on floating-point inputs is not allowed (ONNX requires fmod = 1)");
  const ConstTensor *a = n.constInput(0), *b = n.constInput(1);
  if (!a || !b) {
    n.setOutput(0, runtimeMod(n, cStyle));
    return;
  }
  if (!cStyle) {
    n.setOutput(0, ConstTensor::broadcastBinary(*a, *b, a->type(), [](double x, double y) {
      if (y == 0)
        throw std::runtime_error("integer modulo by zero in a constant");
      double r = std::fmod(x, y);
      return r != 0 && (r < 0) != (y < 0) ? r + y : r;
    }));
    return;
  }
  n.setOutput(0, ConstTensor::broadcastBinary(*a, *b, a->type(), [](double x, double y) { return std::fmod(x, y); }));
}

void importNot(NodeImporter &n) {
  if (const ConstTensor *c = n.constInput(0)) {
    n.setOutput(0, c->map(c->type(), [](double v) { return v == 0 ? 1.0 : 0.0; }));
    return;
  }
  Value x = n.input(0);
  n.setOutput(0, n.emitTyped<NotOp>(x.getType(), {x}));
}

/// IsNaN(x) = not (x == x); no kernel of its own (its result is boolean: autodiff stops there).
void importIsNaN(NodeImporter &n) {
  if (const ConstTensor *c = n.constInput(0)) {
    n.setOutput(0, c->map(onnx::TensorProto_DataType_BOOL, [](double v) { return double(std::isnan(v)); }));
    return;
  }
  Value x = n.input(0);
  auto boolType = RankedTensorType::get(n.inputType(0).getShape(), n.builder().getI1Type());
  Value same = n.emitTyped<EqualOp>(boolType, {x, x});
  n.setOutput(0, n.emitTyped<NotOp>(boolType, {same}));
}

/// IsInf(x) = (x == +inf) or (x == -inf), each side as detect_positive/negative ask.
void importIsInf(NodeImporter &n) {
  bool positive = n.attrInt("detect_positive", 1) != 0, negative = n.attrInt("detect_negative", 1) != 0;
  if (const ConstTensor *c = n.constInput(0)) {
    n.setOutput(0, c->map(onnx::TensorProto_DataType_BOOL, [=](double v) {
      return double(std::isinf(v) && ((v > 0 && positive) || (v < 0 && negative)));
    }));
    return;
  }
  Value x = n.input(0);
  Type et = n.inputType(0).getElementType();
  auto boolType = RankedTensorType::get(n.inputType(0).getShape(), n.builder().getI1Type());
  auto equalTo = [&](double v) { return n.emitTyped<EqualOp>(boolType, {x, n.scalar(v, et)}); };
  Value result;
  if (positive)
    result = equalTo(INFINITY);
  if (negative)
    result = result ? n.emitTyped<OrOp>(boolType, {result, equalTo(-INFINITY)}) : equalTo(-INFINITY);
  if (!result) { // neither side asked for: all false
    std::vector<int64_t> shape = n.inputShape(0);
    n.setOutput(0, ConstTensor::fromInts(std::vector<int64_t>(numElementsOf(shape), 0), shape)
                       .cast(onnx::TensorProto_DataType_BOOL));
    return;
  }
  n.setOutput(0, result);
}

/// Gelu (opset 20): the dialect's op, exact or with the tanh approximation.
void importGelu(NodeImporter &n) {
  std::string approximate = n.attrString("approximate", "none");
  std::optional<GeluApproximation> kind = symbolizeGeluApproximation(approximate);
  if (!kind)
    n.fail("approximate '" + approximate + "' is not one of none, tanh");
  auto attr = n.builder().getNamedAttr("approximate", GeluApproximationAttr::get(n.context(), *kind));
  n.setOutput(0, n.emitTyped<GeluOp>(n.inputType(0), {n.input(0)}, {attr}));
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

/// max(0, min(1, alpha * x + beta)), with Max/Min's gradients (zero outside the ramp).
Value hardSigmoid(NodeImporter &n, Value x, double alpha, double beta) {
  Type et = llvm::cast<RankedTensorType>(x.getType()).getElementType();
  Value ramp = n.emit1<AddOp>({n.emit1<MulOp>({x, n.scalar(alpha, et)}), n.scalar(beta, et)});
  return n.emit1<MaxOp>({n.emit1<MinOp>({ramp, n.scalar(1.0, et)}), n.scalar(0.0, et)});
}

void importHardSigmoid(NodeImporter &n) {
  n.setOutput(0, hardSigmoid(n, n.input(0), n.attrFloat("alpha", 0.2), n.attrFloat("beta", 0.5)));
}

/// HardSwish(x) = x * HardSigmoid(x) with alpha 1/6, beta 1/2 (MobileNetV3).
void importHardSwish(NodeImporter &n) {
  Value x = n.input(0);
  n.setOutput(0, n.emit1<MulOp>({x, hardSigmoid(n, x, 1.0 / 6.0, 0.5)}));
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
  r.add("Equal", binary<EqualOp>([](double a, double b) { return double(a == b); }, true), 1, kNewestOpset);
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
  r.add("Sin", unary<SinOp>([](double x) { return std::sin(x); }));
  r.add("Cos", unary<CosOp>([](double x) { return std::cos(x); }));
  r.add("Sigmoid", unary<SigmoidOp>([](double x) { return 1.0 / (1.0 + std::exp(-x)); }));
  r.add("Relu", unary<ReluOp>([](double x) { return std::max(x, 0.0); }));
  r.add("Not", importNot);
  r.add("Trilu", importTrilu, 14, kNewestOpset);
  r.add("HardSigmoid", importHardSigmoid, 6, kNewestOpset);
  r.add("HardSwish", importHardSwish, 14, kNewestOpset);
  r.add("Mod", importMod, 10, kNewestOpset);
  r.add("IsNaN", importIsNaN, 9, kNewestOpset);
  r.add("IsInf", importIsInf, 10, kNewestOpset);
  r.add("Gelu", importGelu, 20, kNewestOpset);
  r.add("Cast", importCast, 1, kNewestOpset);
  r.add("Identity", importIdentity, 1, kNewestOpset);
  r.add("CastLike", importCastLike, 15, kNewestOpset);
  r.add("Where", importWhere);
  r.add("Clip", importClip, 11);
}

} // namespace cpc::onnx_import
