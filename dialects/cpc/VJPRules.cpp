//===- VJPRules.cpp - the reverse-mode rule of every differentiable op ----===//
//
// One buildVJP per op. Rules build plain cpc ops (or the fused *_grad ops) so that the backward
// graph is as shardable and schedulable as the forward one.
//
#include "dialects/cpc/CpcDialect.h"

#include "mlir/IR/Builders.h"

#include <cmath>

using namespace mlir;
using namespace cpc;

namespace {

RankedTensorType typeOf(Value v) { return llvm::cast<RankedTensorType>(v.getType()); }

/// Small builder for gradient expressions at one location.
struct GradBuilder {
  OpBuilder &b;
  Location loc;

  Value scalar(double v, Value like) {
    Type et = typeOf(like).getElementType();
    auto type = RankedTensorType::get({}, et);
    return b.create<ConstantOp>(loc, DenseElementsAttr::get(type, b.getFloatAttr(et, v)));
  }
  Value zerosLike(Value like) {
    return b.create<BroadcastOp>(loc, like.getType(), scalar(0.0, like));
  }
  Value add(Value x, Value y) { return b.create<AddOp>(loc, x, y); }
  Value sub(Value x, Value y) { return b.create<SubOp>(loc, x, y); }
  Value mul(Value x, Value y) { return b.create<MulOp>(loc, x, y); }
  Value div(Value x, Value y) { return b.create<DivOp>(loc, x, y); }
  Value neg(Value x) { return b.create<NegOp>(loc, x.getType(), x); }
  Value where(Value c, Value x, Value y) { return b.create<WhereOp>(loc, c, x, y); }
  Value reshape(Value v, ArrayRef<int64_t> shape) {
    if (typeOf(v).getShape() == shape)
      return v;
    return b.create<ReshapeOp>(loc, RankedTensorType::get(shape, typeOf(v).getElementType()), v);
  }
  Value transpose(Value v, ArrayRef<int64_t> perm) {
    return b.create<TransposeOp>(loc, v, b.getDenseI64ArrayAttr(perm));
  }
  Value swapLastTwo(Value v) {
    int64_t r = typeOf(v).getRank();
    SmallVector<int64_t> perm;
    for (int64_t d = 0; d < r; ++d)
      perm.push_back(d);
    std::swap(perm[r - 1], perm[r - 2]);
    return transpose(v, perm);
  }
  Value reduceSum(Value v, ArrayRef<int64_t> axes, bool keepdims) {
    if (axes.empty())
      return v;
    return b.create<ReduceSumOp>(loc, v, b.getDenseI64ArrayAttr(axes), b.getBoolAttr(keepdims));
  }
  /// Sums `g` down to `target`'s shape: the VJP of numpy broadcasting.
  Value sumTo(Value g, Type target) {
    auto t = llvm::cast<RankedTensorType>(target);
    auto gt = typeOf(g);
    if (gt.getShape() == t.getShape())
      return g;
    int64_t lead = gt.getRank() - t.getRank();
    SmallVector<int64_t> axes;
    for (int64_t d = 0; d < gt.getRank(); ++d)
      if (d < lead || (t.getDimSize(d - lead) == 1 && gt.getDimSize(d) != 1))
        axes.push_back(d);
    return reshape(reduceSum(g, axes, /*keepdims=*/true), t.getShape());
  }
  /// Broadcasts the gradient of a reduction back over the reduced axes of `input`.
  Value expandReduced(Value g, Value input, ArrayRef<int64_t> axes) {
    SmallVector<int64_t> kept(typeOf(input).getShape());
    for (int64_t a : axes)
      kept[a] = 1;
    Value r = reshape(g, kept);
    return b.create<BroadcastOp>(loc, RankedTensorType::get(typeOf(input).getShape(), typeOf(g).getElementType()), r);
  }
};

/// Rules of one-operand elementwise ops: dx from (x, y = op(x), g).
template <typename OpT>
LogicalResult unaryRule(OpT op, OpBuilder &b, ArrayRef<Value> resultGrads, ArrayRef<bool> needGrad,
                        SmallVectorImpl<Value> &grads,
                        llvm::function_ref<Value(GradBuilder &, Value x, Value y, Value g)> rule) {
  Value g = resultGrads[0];
  if (!g || !needGrad[0]) {
    grads.push_back(Value());
    return success();
  }
  GradBuilder gb{b, op.getLoc()};
  grads.push_back(rule(gb, op->getOperand(0), op->getResult(0), g));
  return success();
}

/// Rules of broadcasting binary ops: (dlhs, drhs) before un-broadcasting.
template <typename OpT>
LogicalResult binaryRule(OpT op, OpBuilder &b, ArrayRef<Value> resultGrads, ArrayRef<bool> needGrad,
                         SmallVectorImpl<Value> &grads,
                         llvm::function_ref<std::pair<Value, Value>(GradBuilder &, Value, Value, Value, Value)> rule) {
  Value g = resultGrads[0];
  if (!g) {
    grads.append({Value(), Value()});
    return success();
  }
  GradBuilder gb{b, op.getLoc()};
  auto [dl, dr] = rule(gb, op.getLhs(), op.getRhs(), op.getResult(), g);
  grads.push_back(needGrad[0] && dl ? gb.sumTo(dl, op.getLhs().getType()) : Value());
  grads.push_back(needGrad[1] && dr ? gb.sumTo(dr, op.getRhs().getType()) : Value());
  return success();
}

/// Gradients of max/min(l, r): to the winner (`lWins` where l wins), split evenly on ties as
/// torch.maximum/minimum do.
std::pair<Value, Value> extremumGrads(GradBuilder &gb, Value lWins, Value l, Value r, Value g) {
  Value half = gb.mul(g, gb.scalar(0.5, g)), zero = gb.scalar(0.0, g);
  Value tie = gb.b.create<EqualOp>(gb.loc, l, r);
  return {gb.where(tie, half, gb.where(lWins, g, zero)), gb.where(tie, half, gb.where(lWins, zero, g))};
}

} // namespace

#define CPC_UNARY_VJP(OP, ...)                                                                    \
  LogicalResult OP::buildVJP(OpBuilder &b, ArrayRef<Value> rg, ArrayRef<bool> need,                \
                             SmallVectorImpl<Value> &grads) {                                      \
    return unaryRule(*this, b, rg, need, grads, [&](GradBuilder & gb, Value x, Value y, Value g) -> Value { \
      (void)x;                                                                                     \
      (void)y;                                                                                     \
      __VA_ARGS__                                                                                  \
    });                                                                                            \
  }

CPC_UNARY_VJP(NegOp, { return gb.neg(g); })
CPC_UNARY_VJP(ExpOp, { return gb.mul(g, y); })
CPC_UNARY_VJP(LogOp, { return gb.div(g, x); })
CPC_UNARY_VJP(SqrtOp, { return gb.div(g, gb.mul(y, gb.scalar(2.0, y))); })
CPC_UNARY_VJP(RsqrtOp, { return gb.mul(g, gb.mul(gb.mul(y, gb.mul(y, y)), gb.scalar(-0.5, y))); })
CPC_UNARY_VJP(ReciprocalOp, { return gb.neg(gb.mul(g, gb.mul(y, y))); })
CPC_UNARY_VJP(TanhOp, { return gb.mul(g, gb.sub(gb.scalar(1.0, y), gb.mul(y, y))); })
CPC_UNARY_VJP(SigmoidOp, { return gb.mul(g, gb.mul(y, gb.sub(gb.scalar(1.0, y), y))); })
CPC_UNARY_VJP(SinOp, { return gb.mul(g, gb.b.create<CosOp>(gb.loc, x.getType(), x)); })
CPC_UNARY_VJP(CosOp, { return gb.neg(gb.mul(g, gb.b.create<SinOp>(gb.loc, x.getType(), x))); })
CPC_UNARY_VJP(ErfOp, {
  // d/dx erf(x) = 2/sqrt(pi) * exp(-x^2)
  Value e = gb.b.create<ExpOp>(gb.loc, x.getType(), gb.neg(gb.mul(x, x)));
  return gb.mul(g, gb.mul(e, gb.scalar(2.0 / std::sqrt(M_PI), x)));
})
CPC_UNARY_VJP(ReluOp, {
  Value positive = gb.b.create<GreaterOp>(gb.loc, x, gb.scalar(0.0, x));
  return gb.where(positive, g, gb.scalar(0.0, g));
})
CPC_UNARY_VJP(AbsOp, {
  Value zero = gb.scalar(0.0, x);
  Value positive = gb.b.create<GreaterOp>(gb.loc, x, zero);
  Value negative = gb.b.create<LessOp>(gb.loc, x, zero);
  return gb.where(positive, g, gb.where(negative, gb.neg(g), zero)); // sign(0) = 0, as torch
})
CPC_UNARY_VJP(GeluOp, { return gb.b.create<GeluGradOp>(gb.loc, x.getType(), x, g, getApproximateAttr()); })
CPC_UNARY_VJP(SoftmaxOp, { return gb.b.create<SoftmaxGradOp>(gb.loc, y.getType(), y, g, getAxisAttr()); })
CPC_UNARY_VJP(CastOp, {
  // Only float -> float casts carry gradients; integer results are never active.
  if (!llvm::isa<FloatType>(typeOf(x).getElementType()))
    return Value();
  return gb.b.create<CastOp>(gb.loc, x.getType(), g);
})
CPC_UNARY_VJP(ReshapeOp, { return gb.reshape(g, typeOf(x).getShape()); })
CPC_UNARY_VJP(BroadcastOp, { return gb.sumTo(g, x.getType()); })
CPC_UNARY_VJP(TransposeOp, {
  ArrayRef<int64_t> perm = getPermutation();
  SmallVector<int64_t> inverse(perm.size());
  for (size_t i = 0; i < perm.size(); ++i)
    inverse[perm[i]] = i;
  return gb.transpose(g, inverse);
})
CPC_UNARY_VJP(SliceOp, {
  // Put the gradient back where the slice took it from: a zero pad with interior gaps.
  SmallVector<int64_t> low, high, interior;
  auto in = typeOf(x), out = typeOf(y);
  for (int64_t d = 0; d < in.getRank(); ++d) {
    int64_t start = getStarts()[d], stride = getStrides()[d], n = out.getDimSize(d);
    low.push_back(start);
    interior.push_back(stride - 1);
    high.push_back(in.getDimSize(d) - (start + (n - 1) * stride + 1));
  }
  return gb.b.create<PadOp>(gb.loc, g, gb.b.getDenseI64ArrayAttr(low), gb.b.getDenseI64ArrayAttr(high),
                            gb.b.getDenseI64ArrayAttr(interior), gb.b.getF64FloatAttr(0.0));
})
CPC_UNARY_VJP(PadOp, {
  SmallVector<int64_t> starts, limits, strides;
  auto in = typeOf(x);
  for (int64_t d = 0; d < in.getRank(); ++d) {
    int64_t step = getInteriorPadding()[d] + 1;
    starts.push_back(getLowPadding()[d]);
    strides.push_back(step);
    limits.push_back(getLowPadding()[d] + (in.getDimSize(d) - 1) * step + 1);
  }
  return gb.b.create<SliceOp>(gb.loc, g, gb.b.getDenseI64ArrayAttr(starts), gb.b.getDenseI64ArrayAttr(limits),
                              gb.b.getDenseI64ArrayAttr(strides));
})

#undef CPC_UNARY_VJP

#define CPC_BINARY_VJP(OP, ...)                                                                   \
  LogicalResult OP::buildVJP(OpBuilder &b, ArrayRef<Value> rg, ArrayRef<bool> need,                \
                             SmallVectorImpl<Value> &grads) {                                      \
    return binaryRule(*this, b, rg, need, grads,                                                   \
                      [&](GradBuilder & gb, Value l, Value r, Value y, Value g) -> std::pair<Value, Value> { \
                        (void)l;                                                                   \
                        (void)r;                                                                   \
                        (void)y;                                                                   \
                        __VA_ARGS__                                                                \
                      });                                                                          \
  }

CPC_BINARY_VJP(AddOp, { return {g, g}; })
CPC_BINARY_VJP(SubOp, { return {g, need[1] ? gb.neg(g) : Value()}; })
CPC_BINARY_VJP(MulOp, { return {need[0] ? gb.mul(g, r) : Value(), need[1] ? gb.mul(g, l) : Value()}; })
CPC_BINARY_VJP(DivOp, {
  Value t = gb.div(g, r);
  return {t, need[1] ? gb.neg(gb.mul(t, y)) : Value()}; // d/dr (l/r) = -(l/r)/r
})
CPC_BINARY_VJP(PowOp, {
  Value dl, dr;
  if (need[0]) // r * l^(r-1)
    dl = gb.mul(g, gb.mul(r, gb.b.create<PowOp>(gb.loc, l, gb.sub(r, gb.scalar(1.0, r)))));
  if (need[1])
    dr = gb.mul(g, gb.mul(y, gb.b.create<LogOp>(gb.loc, l.getType(), l)));
  return {dl, dr};
})
CPC_BINARY_VJP(MaxOp, { return extremumGrads(gb, gb.b.create<GreaterOp>(gb.loc, l, r), l, r, g); })
CPC_BINARY_VJP(MinOp, { return extremumGrads(gb, gb.b.create<LessOp>(gb.loc, l, r), l, r, g); })

#undef CPC_BINARY_VJP

LogicalResult WhereOp::buildVJP(OpBuilder &b, ArrayRef<Value> rg, ArrayRef<bool> need, SmallVectorImpl<Value> &grads) {
  Value g = rg[0];
  grads.push_back(Value()); // the condition
  if (!g) {
    grads.append({Value(), Value()});
    return success();
  }
  GradBuilder gb{b, getLoc()};
  Value zero = gb.scalar(0.0, g);
  grads.push_back(need[1] ? gb.sumTo(gb.where(getCondition(), g, zero), getOnTrue().getType()) : Value());
  grads.push_back(need[2] ? gb.sumTo(gb.where(getCondition(), zero, g), getOnFalse().getType()) : Value());
  return success();
}

LogicalResult MatMulOp::buildVJP(OpBuilder &b, ArrayRef<Value> rg, ArrayRef<bool> need, SmallVectorImpl<Value> &grads) {
  Value g = rg[0];
  if (!g) {
    grads.append({Value(), Value()});
    return success();
  }
  GradBuilder gb{b, getLoc()};
  auto mm = [&](Value x, Value y, bool tx, bool ty) -> Value {
    return b.create<MatMulOp>(getLoc(), x, y, b.getBoolAttr(tx), b.getBoolAttr(ty));
  };
  // Promote rank-1 operands as numpy does (they are never transposed), so every product below
  // is a plain (batched) matmul. With A' = op(A), B' = op(B): dA' = g B'^T and dB' = A'^T g, and
  // the transpose flags let GEMM read every operand as stored.
  bool tA = getTransposeLhs(), tB = getTransposeRhs();
  Value a = getLhs(), w = getRhs();
  SmallVector<int64_t> aShape(typeOf(a).getShape()), wShape(typeOf(w).getShape());
  bool aVector = aShape.size() == 1, wVector = wShape.size() == 1;
  if (aVector)
    aShape.insert(aShape.begin(), 1);
  if (wVector)
    wShape.push_back(1);
  Value a2 = gb.reshape(a, aShape), w2 = gb.reshape(w, wShape);
  SmallVector<int64_t> gShape(typeOf(g).getShape());
  if (aVector)
    gShape.insert(gShape.end() - (wVector ? 0 : 1), 1);
  if (wVector)
    gShape.push_back(1);
  Value g2 = gb.reshape(g, gShape);
  Value da, dw;
  if (need[0]) {
    da = tA ? mm(w2, g2, tB, true) : mm(g2, w2, false, !tB);
    da = gb.reshape(gb.sumTo(da, a2.getType()), typeOf(a).getShape());
  }
  if (need[1]) {
    if (wShape.size() == 2 && aShape.size() > 2 && !tA) {
      // x[.., M, K] @ W: dW sums x^T g over the batch: flatten the batch into the contraction.
      int64_t k = aShape.back(), n = gShape.back();
      Value aFlat = gb.reshape(a2, {typeOf(a2).getNumElements() / k, k});
      Value gFlat = gb.reshape(g2, {typeOf(g2).getNumElements() / n, n});
      dw = tB ? mm(gFlat, aFlat, true, false) : mm(aFlat, gFlat, true, false);
    } else {
      dw = tB ? mm(g2, a2, true, tA) : mm(a2, g2, !tA, false);
      dw = gb.sumTo(dw, w2.getType());
    }
    dw = gb.reshape(dw, typeOf(w).getShape());
  }
  grads.append({da, dw});
  return success();
}

namespace {
template <typename OpT>
LogicalResult reduceRule(OpT op, OpBuilder &b, ArrayRef<Value> rg, ArrayRef<bool> need, SmallVectorImpl<Value> &grads,
                         llvm::function_ref<Value(GradBuilder &, Value x, Value y, Value expandedGrad)> rule) {
  Value g = rg[0];
  if (!g || !need[0]) {
    grads.push_back(Value());
    return success();
  }
  GradBuilder gb{b, op.getLoc()};
  Value x = op.getInput();
  Value expanded = gb.expandReduced(g, x, op.getAxes());
  grads.push_back(rule(gb, x, op.getResult(), expanded));
  return success();
}
} // namespace

LogicalResult ReduceSumOp::buildVJP(OpBuilder &b, ArrayRef<Value> rg, ArrayRef<bool> need, SmallVectorImpl<Value> &grads) {
  return reduceRule(*this, b, rg, need, grads, [](GradBuilder &, Value, Value, Value ge) { return ge; });
}

LogicalResult ReduceMeanOp::buildVJP(OpBuilder &b, ArrayRef<Value> rg, ArrayRef<bool> need, SmallVectorImpl<Value> &grads) {
  return reduceRule(*this, b, rg, need, grads, [&](GradBuilder &gb, Value x, Value, Value ge) {
    int64_t count = 1;
    for (int64_t a : getAxes())
      count *= typeOf(x).getDimSize(a);
    return gb.mul(ge, gb.scalar(1.0 / count, ge));
  });
}

namespace {
/// max/min reductions: the gradient goes to the elements equal to the result, split among ties.
template <typename OpT>
LogicalResult extremumRule(OpT op, OpBuilder &b, ArrayRef<Value> rg, ArrayRef<bool> need, SmallVectorImpl<Value> &grads) {
  return reduceRule(op, b, rg, need, grads, [&](GradBuilder &gb, Value x, Value y, Value ge) {
    Value yExpanded = gb.expandReduced(y, x, op.getAxes());
    Value hit = gb.b.create<EqualOp>(gb.loc, x, yExpanded);
    Value ones = gb.b.create<CastOp>(gb.loc, x.getType(), hit);
    Value count = gb.expandReduced(gb.reduceSum(ones, op.getAxes(), false), x, op.getAxes());
    return gb.div(gb.mul(ge, ones), count);
  });
}
} // namespace

LogicalResult ReduceMaxOp::buildVJP(OpBuilder &b, ArrayRef<Value> rg, ArrayRef<bool> need, SmallVectorImpl<Value> &grads) {
  return extremumRule(*this, b, rg, need, grads);
}
LogicalResult ReduceMinOp::buildVJP(OpBuilder &b, ArrayRef<Value> rg, ArrayRef<bool> need, SmallVectorImpl<Value> &grads) {
  return extremumRule(*this, b, rg, need, grads);
}
LogicalResult ReduceProdOp::buildVJP(OpBuilder &b, ArrayRef<Value> rg, ArrayRef<bool> need, SmallVectorImpl<Value> &grads) {
  return reduceRule(*this, b, rg, need, grads, [&](GradBuilder &gb, Value x, Value y, Value ge) {
    return gb.div(gb.mul(ge, gb.expandReduced(y, x, getAxes())), x); // assumes no zeros in x
  });
}

LogicalResult LayerNormOp::buildVJP(OpBuilder &b, ArrayRef<Value> rg, ArrayRef<bool> need, SmallVectorImpl<Value> &grads) {
  Value g = rg[0];
  if (!g) {
    grads.append({Value(), Value(), Value()});
    return success();
  }
  auto lg = b.create<LayerNormGradOp>(getLoc(), getInput(), getScale(), g, getAxisAttr(), getEpsilonAttr());
  grads.push_back(need[0] ? lg.getInputGrad() : Value());
  grads.push_back(need[1] ? lg.getScaleGrad() : Value());
  grads.push_back(need[2] ? lg.getBiasGrad() : Value());
  return success();
}

LogicalResult AttentionOp::buildVJP(OpBuilder &b, ArrayRef<Value> rg, ArrayRef<bool> need, SmallVectorImpl<Value> &grads) {
  if (rg[1]) // cpc-fuse-attention fuses only where nothing else reads them
    return emitOpError("has no gradient for its probabilities (only the result is differentiable)");
  Value g = rg[0];
  if (!g) {
    grads.append({Value(), Value(), Value()});
    return success();
  }
  auto ag = b.create<AttentionGradOp>(getLoc(), TypeRange{getQ().getType(), getK().getType(), getV().getType()}, getQ(),
                                      getK(), getV(), getProbabilities(), g, getScaleAttr(), getLayoutAttr());
  grads.push_back(need[0] ? ag.getQGrad() : Value());
  grads.push_back(need[1] ? ag.getKGrad() : Value());
  grads.push_back(need[2] ? ag.getVGrad() : Value());
  return success();
}

LogicalResult Conv2DOp::buildVJP(OpBuilder &b, ArrayRef<Value> rg, ArrayRef<bool> need, SmallVectorImpl<Value> &grads) {
  Value g = rg[0];
  if (!g) {
    grads.append(getNumOperands(), Value());
    return success();
  }
  GradBuilder gb{b, getLoc()};
  auto attrs = [&](auto &&build) {
    return build(getStridesAttr(), getPaddingAttr(), getDilationsAttr(), getGroupsAttr());
  };
  grads.push_back(need[0] ? attrs([&](auto s, auto p, auto d, auto gr) {
    return b.create<Conv2DGradInputOp>(getLoc(), getInput().getType(), g, getWeight(), s, p, d, gr).getResult();
  }) : Value());
  grads.push_back(need[1] ? attrs([&](auto s, auto p, auto d, auto gr) {
    return b.create<Conv2DGradWeightOp>(getLoc(), getWeight().getType(), getInput(), g, s, p, d, gr).getResult();
  }) : Value());
  if (getBias())
    grads.push_back(need[2] ? gb.reduceSum(g, {0, 2, 3}, false) : Value());
  return success();
}

LogicalResult ConcatOp::buildVJP(OpBuilder &b, ArrayRef<Value> rg, ArrayRef<bool> need, SmallVectorImpl<Value> &grads) {
  Value g = rg[0];
  int64_t axis = getAxis(), offset = 0;
  auto gt = typeOf(getResult());
  for (auto [i, in] : llvm::enumerate(getInputs())) {
    int64_t size = typeOf(in).getDimSize(axis);
    if (g && need[i]) {
      SmallVector<int64_t> starts(gt.getRank(), 0), limits(gt.getShape()), strides(gt.getRank(), 1);
      starts[axis] = offset;
      limits[axis] = offset + size;
      grads.push_back(b.create<SliceOp>(getLoc(), g, b.getDenseI64ArrayAttr(starts), b.getDenseI64ArrayAttr(limits),
                                        b.getDenseI64ArrayAttr(strides)));
    } else {
      grads.push_back(Value());
    }
    offset += size;
  }
  return success();
}

// Never called: autodiff does not differentiate through an op without a derivative.
LogicalResult StopGradientOp::buildVJP(OpBuilder &, ArrayRef<Value>, ArrayRef<bool>, SmallVectorImpl<Value> &grads) {
  grads.push_back(Value());
  return success();
}
bool StopGradientOp::hasDerivative() { return false; }

LogicalResult GatherOp::buildVJP(OpBuilder &b, ArrayRef<Value> rg, ArrayRef<bool> need, SmallVectorImpl<Value> &grads) {
  Value g = rg[0];
  grads.push_back(g && need[0] ? b.create<GatherGradOp>(getLoc(), g, getIndices(), getAxisAttr(),
                                                        b.getI64IntegerAttr(typeOf(getData()).getDimSize(getAxis())), ArrayAttr())
                                     .getResult()
                               : Value());
  grads.push_back(Value());
  return success();
}

LogicalResult GatherElementsOp::buildVJP(OpBuilder &b, ArrayRef<Value> rg, ArrayRef<bool> need,
                                         SmallVectorImpl<Value> &grads) {
  Value g = rg[0];
  grads.push_back(g && need[0] ? b.create<GatherElementsGradOp>(getLoc(), getData().getType(), g, getIndices(),
                                                                getAxisAttr(), ArrayAttr())
                                     .getResult()
                               : Value());
  grads.push_back(Value());
  return success();
}

LogicalResult TopKOp::buildVJP(OpBuilder &b, ArrayRef<Value> rg, ArrayRef<bool> need, SmallVectorImpl<Value> &grads) {
  // values = gather_elements(input, indices): its VJP scatters back to the picked positions.
  Value g = rg[0];
  grads.push_back(g && need[0] ? b.create<GatherElementsGradOp>(getLoc(), getInput().getType(), g, getIndices(),
                                                                getAxisAttr(), ArrayAttr())
                                     .getResult()
                               : Value());
  return success();
}

LogicalResult ScatterNDOp::buildVJP(OpBuilder &b, ArrayRef<Value> rg, ArrayRef<bool> need, SmallVectorImpl<Value> &grads) {
  Value g = rg[0];
  if (g && (need[0] || need[2]) && getReduction() != ScatterReduction::None)
    return emitOpError("has no gradient rule for reduction '") << stringifyScatterReduction(getReduction()) << "'";
  if (g && need[2])
    return emitOpError("has no gradient rule for its updates operand yet");
  GradBuilder gb{b, getLoc()};
  // Overwritten positions of data get no gradient: scatter zeros over the gradient.
  grads.push_back(g && need[0] ? b.create<ScatterNDOp>(getLoc(), g, getIndices(), gb.zerosLike(getUpdates()),
                                                       getReductionAttr())
                                     .getResult()
                               : Value());
  grads.append({Value(), Value()});
  return success();
}
