//===- Neural.cpp - ONNX contractions, norms, conv, sort, gather/scatter --===//
#include "frontends/onnx/NodeImporter.h"

#include <map>
#include <set>

using namespace mlir;

namespace cpc::onnx_import {
namespace {

void requireFloat(NodeImporter &n, size_t i) {
  if (!llvm::isa<FloatType>(n.inputType(i).getElementType()))
    n.fail("input " + std::to_string(i) + " must be floating point");
}

void importMatMul(NodeImporter &n) {
  requireFloat(n, 0);
  n.setOutput(0, n.emit1<MatMulOp>({n.input(0), n.input(1)}));
}

/// Gemm: alpha * op(A) @ op(B) + beta * C.
void importGemm(NodeImporter &n) {
  requireFloat(n, 0);
  Value a = n.input(0), b = n.input(1);
  if (n.inputShape(0).size() != 2 || n.inputShape(1).size() != 2)
    n.fail("A and B must be matrices");
  if (n.attrInt("transA", 0))
    a = n.transpose(a, {1, 0});
  if (n.attrInt("transB", 0))
    b = n.transpose(b, {1, 0});
  Value y = n.emit1<MatMulOp>({a, b});
  Type et = n.inputType(0).getElementType();
  double alpha = n.attrFloat("alpha", 1.0), beta = n.attrFloat("beta", 1.0);
  if (alpha != 1.0)
    y = n.emit1<MulOp>({y, n.scalar(alpha, et)});
  if (n.hasInput(2) && beta != 0.0) {
    Value c = n.input(2);
    if (beta != 1.0)
      c = n.emit1<MulOp>({c, n.scalar(beta, et)});
    y = n.emit1<AddOp>({y, c});
  }
  n.setOutput(0, y);
}

void importConv(NodeImporter &n) {
  requireFloat(n, 0);
  std::vector<int64_t> in = n.inputShape(0), w = n.inputShape(1);
  if (in.size() != 4 || w.size() != 4)
    n.fail("only 2-D convolution (NCHW input, OIHW weight) is supported");
  std::string autoPad = n.attrString("auto_pad", "NOTSET");
  if (autoPad != "NOTSET" && autoPad != "VALID" && autoPad != "SAME_UPPER" && autoPad != "SAME_LOWER")
    n.fail("auto_pad " + autoPad + " is not one of NOTSET, VALID, SAME_UPPER, SAME_LOWER");
  if (n.hasAttr("kernel_shape") && n.attrInts("kernel_shape") != std::vector<int64_t>{w[2], w[3]})
    n.fail("kernel_shape does not match the weight");
  std::vector<int64_t> strides = n.attrInts("strides", std::vector<int64_t>{1, 1});
  std::vector<int64_t> pads = n.attrInts("pads", std::vector<int64_t>{0, 0, 0, 0});
  std::vector<int64_t> dilations = n.attrInts("dilations", std::vector<int64_t>{1, 1});
  if (strides.size() != 2 || dilations.size() != 2 || pads.size() != 4)
    n.fail("strides and dilations need 2 values and pads 4 for a 2-D convolution");
  if (autoPad == "VALID")
    pads = {0, 0, 0, 0};
  if (autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER")
    for (int d = 0; d < 2; ++d) { // ceil(size / stride) outputs; the odd pad after (UPPER) or before
      int64_t size = in[2 + d], outputs = (size + strides[d] - 1) / strides[d];
      int64_t span = (w[2 + d] - 1) * dilations[d] + 1;
      int64_t total = std::max<int64_t>((outputs - 1) * strides[d] + span - size, 0);
      pads[d] = autoPad == "SAME_UPPER" ? total / 2 : total - total / 2;
      pads[d + 2] = total - pads[d];
    }
  SmallVector<Value> operands{n.input(0), n.input(1)};
  if (n.hasInput(2))
    operands.push_back(n.input(2));
  n.setOutput(0, n.emit1<Conv2DOp>(operands, {n.namedI64s("strides", strides), n.namedI64s("padding", pads),
                                              n.namedI64s("dilations", dilations),
                                              n.namedI64("groups", n.attrInt("group", 1))}));
}

void importLayerNormalization(NodeImporter &n) {
  requireFloat(n, 0);
  std::vector<int64_t> in = n.inputShape(0);
  int64_t axis = n.normalizeAxis(n.attrInt("axis", -1), in.size());
  auto et = n.inputType(0).getElementType();
  double epsilon = n.attrFloat("epsilon", 1e-5);
  // Optional outputs Mean and InvStdDev = 1 / sqrt(mean((x - Mean)^2) + epsilon) over the axes
  // [axis, rank), kept as size-1 dims; their type U is float (stash_type 1).
  bool wantMean = n.node().output_size() > 1 && !n.node().output(1).empty();
  bool wantInvStd = n.node().output_size() > 2 && !n.node().output(2).empty();
  if (wantMean || wantInvStd) {
    if (n.attrInt("stash_type", onnx::TensorProto_DataType_FLOAT) != onnx::TensorProto_DataType_FLOAT)
      n.fail("the Mean and InvStdDev outputs with stash_type other than 1 (float) are not supported");
    std::vector<int64_t> axes;
    for (int64_t d = axis; d < (int64_t)in.size(); ++d)
      axes.push_back(d);
    auto reduceMean = [&](Value v) {
      return n.emit1<ReduceMeanOp>({v}, {n.namedI64s("axes", axes), n.namedBool("keepdims", true)});
    };
    auto stash = [&](Value v) -> Value {
      auto t = llvm::cast<RankedTensorType>(v.getType());
      if (t.getElementType().isF32())
        return v;
      return n.emitTyped<CastOp>(RankedTensorType::get(t.getShape(), n.builder().getF32Type()), {v});
    };
    Value x = n.input(0);
    Value mean = reduceMean(x);
    if (wantMean)
      n.setOutput(1, stash(mean));
    if (wantInvStd) {
      Value d = n.emit1<SubOp>({x, mean});
      Value var = reduceMean(n.emit1<MulOp>({d, d}));
      Value std = n.emitTyped<SqrtOp>(var.getType(), {n.emit1<AddOp>({var, n.scalar(epsilon, et)})});
      n.setOutput(2, stash(n.emitTyped<ReciprocalOp>(std.getType(), {std})));
    }
  }
  auto normType = RankedTensorType::get(ArrayRef<int64_t>(in).drop_front(axis), et);
  auto fit = [&](Value v) -> Value { // scale/bias may be given in a broadcastable shape
    if (v.getType() == normType)
      return v;
    auto t = llvm::cast<RankedTensorType>(v.getType());
    if (!isBroadcastableTo(t.getShape(), normType.getShape()))
      n.fail("scale/bias shape does not broadcast to the normalized shape");
    return n.emitTyped<BroadcastOp>(normType, {v});
  };
  Value scale = fit(n.input(1));
  Value bias = n.hasInput(2) ? fit(n.input(2)) : n.emitTyped<BroadcastOp>(normType, {n.scalar(0.0, et)});
  n.setOutput(0, n.emit1<LayerNormOp>({n.input(0), scale, bias},
                                      {n.namedI64("axis", axis), n.namedF64("epsilon", epsilon)}));
}

void importSoftmax(NodeImporter &n) {
  requireFloat(n, 0);
  Value x = n.input(0);
  int64_t axis = n.normalizeAxis(n.attrInt("axis", -1), n.inputShape(0).size());
  n.setOutput(0, n.emitTyped<SoftmaxOp>(x.getType(), {x}, {n.namedI64("axis", axis)}));
}

/// Einsum over one or two operands, lowered to reduce_sum / transpose / reshape / matmul.
class EinsumLowering {
public:
  explicit EinsumLowering(NodeImporter &n) : n_(n) {}

  void run() {
    std::string eq;
    for (char c : n_.attrString("equation"))
      if (c != ' ')
        eq += c;
    if (eq.find("...") != std::string::npos)
      n_.fail("ellipsis in equations is not supported");
    size_t arrow = eq.find("->");
    if (arrow == std::string::npos) {
      // Implicit output: the labels that appear exactly once, in alphabetical order.
      std::map<char, int> uses;
      for (char c : eq)
        if (c != ',')
          ++uses[c];
      arrow = eq.size();
      eq += "->";
      for (auto [c, count] : uses)
        if (count == 1)
          eq += c;
    }
    std::string output = eq.substr(arrow + 2);
    std::vector<std::string> inputs;
    std::string lhs = eq.substr(0, arrow);
    for (size_t start = 0;;) {
      size_t comma = lhs.find(',', start);
      inputs.push_back(lhs.substr(start, comma - start));
      if (comma == std::string::npos)
        break;
      start = comma + 1;
    }
    if (inputs.size() != n_.numInputs() || inputs.size() > 2)
      n_.fail("only one- and two-operand equations are supported");
    std::vector<Term> terms;
    for (size_t i = 0; i < inputs.size(); ++i) {
      Term t{n_.input(i), inputs[i], n_.inputShape(i)};
      if (t.labels.size() != t.shape.size())
        n_.fail("operand " + std::to_string(i) + " has rank " + std::to_string(t.shape.size()) +
                " but its labels are '" + t.labels + "'");
      if (std::set<char>(t.labels.begin(), t.labels.end()).size() != t.labels.size())
        n_.fail("repeated labels within one operand (diagonals) are not supported");
      terms.push_back(t);
    }
    // Sum away labels that appear in one operand only and not in the output.
    for (size_t i = 0; i < terms.size(); ++i) {
      std::string keep;
      for (char c : terms[i].labels) {
        bool elsewhere = output.find(c) != std::string::npos ||
                         (terms.size() == 2 && terms[1 - i].labels.find(c) != std::string::npos);
        if (elsewhere)
          keep += c;
      }
      terms[i] = sumTo(terms[i], keep);
    }
    Term result = terms.size() == 1 ? terms[0] : contract(terms[0], terms[1], output);
    for (char c : output)
      if (result.labels.find(c) == std::string::npos)
        n_.fail("output label '" + std::string(1, c) + "' appears in no operand");
    n_.setOutput(0, permuteTo(result, output).value);
  }

private:
  struct Term {
    Value value;
    std::string labels;
    std::vector<int64_t> shape;
  };

  Term sumTo(const Term &t, const std::string &keep) {
    if (keep == t.labels)
      return t;
    std::vector<int64_t> axes, shape;
    for (size_t d = 0; d < t.labels.size(); ++d) {
      if (keep.find(t.labels[d]) == std::string::npos)
        axes.push_back(d);
      else
        shape.push_back(t.shape[d]);
    }
    Value v = n_.emit1<ReduceSumOp>({t.value}, {n_.namedI64s("axes", axes), n_.namedBool("keepdims", false)});
    std::string labels;
    for (char c : t.labels)
      if (keep.find(c) != std::string::npos)
        labels += c;
    return {v, labels, shape};
  }

  Term permuteTo(const Term &t, const std::string &order) {
    std::vector<int64_t> perm, shape;
    for (char c : order) {
      size_t d = t.labels.find(c);
      perm.push_back(d);
      shape.push_back(t.shape[d]);
    }
    return {n_.transpose(t.value, perm), order, shape};
  }

  int64_t sizeOf(const Term &t, char c) { return t.shape[t.labels.find(c)]; }

  Term contract(const Term &a, const Term &b, const std::string &output) {
    std::string batch, freeA, freeB, contracted;
    for (char c : a.labels) {
      bool inB = b.labels.find(c) != std::string::npos, inOut = output.find(c) != std::string::npos;
      if (inB && sizeOf(a, c) != sizeOf(b, c))
        n_.fail("label '" + std::string(1, c) + "' has sizes " + std::to_string(sizeOf(a, c)) + " and " +
                std::to_string(sizeOf(b, c)));
      (inB ? (inOut ? batch : contracted) : freeA) += c;
    }
    for (char c : b.labels)
      if (a.labels.find(c) == std::string::npos)
        freeB += c;
    auto prod = [&](const Term &t, const std::string &labels) {
      int64_t p = 1;
      for (char c : labels)
        p *= sizeOf(t, c);
      return p;
    };
    std::vector<int64_t> batchShape;
    for (char c : batch)
      batchShape.push_back(sizeOf(a, c));
    // An operand already stored as [batch, K, M] / [batch, N, K] is read transposed by the matmul
    // instead of being copied into a transposed layout (e.g. the keys in q @ k^T).
    bool tA = a.labels == batch + contracted + freeA && freeA.size() == 1 && contracted.size() == 1;
    bool tB = b.labels == batch + freeB + contracted && freeB.size() == 1 && contracted.size() == 1;
    Term at = tA ? a : permuteTo(a, batch + freeA + contracted);
    Term bt = tB ? b : permuteTo(b, batch + contracted + freeB);
    std::vector<int64_t> aShape(batchShape), bShape(batchShape);
    if (tA)
      aShape.insert(aShape.end(), {prod(a, contracted), prod(a, freeA)});
    else
      aShape.insert(aShape.end(), {prod(a, freeA), prod(a, contracted)});
    if (tB)
      bShape.insert(bShape.end(), {prod(b, freeB), prod(b, contracted)});
    else
      bShape.insert(bShape.end(), {prod(b, contracted), prod(b, freeB)});
    Value y = n_.emit1<MatMulOp>({n_.reshape(at.value, aShape), n_.reshape(bt.value, bShape)},
                                 {n_.namedBool("transpose_lhs", tA), n_.namedBool("transpose_rhs", tB)});
    std::vector<int64_t> shape(batchShape);
    for (char c : freeA)
      shape.push_back(sizeOf(a, c));
    for (char c : freeB)
      shape.push_back(sizeOf(b, c));
    return {n_.reshape(y, shape), batch + freeA + freeB, shape};
  }

  NodeImporter &n_;
};

void importEinsum(NodeImporter &n) {
  for (size_t i = 0; i < n.numInputs(); ++i)
    requireFloat(n, i);
  EinsumLowering(n).run();
}

void importTopK(NodeImporter &n) {
  std::vector<int64_t> in = n.inputShape(0);
  int64_t axis = n.normalizeAxis(n.attrInt("axis", -1), in.size());
  int64_t k = n.requireConstScalar(1, "K").getInt(0);
  Operation *op = n.emit<TopKOp>({n.input(0)}, {n.namedI64("k", k), n.namedI64("axis", axis),
                                                n.namedBool("largest", n.attrInt("largest", 1) != 0),
                                                n.namedBool("sorted", n.attrInt("sorted", 1) != 0)},
                                 /*numResults=*/2);
  n.setOutput(0, op->getResult(0));
  n.setOutput(1, op->getResult(1));
}

void importGatherElements(NodeImporter &n) {
  int64_t axis = n.normalizeAxis(n.attrInt("axis", 0), n.inputShape(0).size());
  n.setOutput(0, n.emit1<GatherElementsOp>({n.input(0), n.input(1)}, {n.namedI64("axis", axis)}));
}

/// ScatterND of constants (e.g. MAE's `mask[:, :len_keep] = 0` on a ones tensor) folds on the host:
/// the mask is then a plain constant, which data parallelism can split along the batch.
bool foldScatterND(NodeImporter &n, const std::string &reduction) {
  const ConstTensor *data = n.constInput(0), *indices = n.constInput(1), *updates = n.constInput(2);
  if (!data || !indices || !updates || data->numElements() > (1 << 16))
    return false;
  ConstTensor out = *data;
  int64_t k = indices->shape().back(), rows = indices->numElements() / std::max<int64_t>(k, 1);
  std::vector<int64_t> strides = stridesOf(data->shape());
  int64_t slice = numElementsOf({data->shape().begin() + k, data->shape().end()});
  if (updates->numElements() != rows * slice)
    n.fail("updates do not match the indexed slices");
  for (int64_t r = 0; r < rows; ++r) {
    int64_t offset = 0;
    for (int64_t d = 0; d < k; ++d) {
      int64_t idx = indices->getInt(r * k + d), dim = data->shape()[d];
      if (idx < 0)
        idx += dim;
      if (idx < 0 || idx >= dim)
        n.fail("index " + std::to_string(indices->getInt(r * k + d)) + " out of range for dim " + std::to_string(dim));
      offset += idx * strides[d];
    }
    for (int64_t e = 0; e < slice; ++e) {
      double u = updates->getDouble(r * slice + e), v = out.getDouble(offset + e);
      out.set(offset + e, reduction == "add" ? v + u : reduction == "mul" ? v * u : u);
    }
  }
  n.setOutput(0, out);
  return true;
}

void importScatterND(NodeImporter &n) {
  std::string reduction = n.attrString("reduction", "none");
  if ((reduction == "none" || reduction == "add" || reduction == "mul") && foldScatterND(n, reduction))
    return;
  n.setOutput(0, n.emit1<ScatterNDOp>({n.input(0), n.input(1), n.input(2)}, {n.namedScatterReduction(reduction)}));
}

/// Uniform numbers in [low, high) of `shape`, from this node's stream (docs/random.md).
Value emitRandomUniform(NodeImporter &n, const std::vector<int64_t> &shape, Type et, double low, double high) {
  if (!et.isF32() && !et.isF64())
    n.fail("random values of type other than float or double are not supported");
  auto type = RankedTensorType::get(shape, et);
  return n.builder().create<RandomUniformOp>(n.loc(), type, n.builder().getF64FloatAttr(low),
                                             n.builder().getF64FloatAttr(high),
                                             n.builder().getI64IntegerAttr(n.randomStreamSeed()));
}

void emitRandomUniform(NodeImporter &n, const std::vector<int64_t> &shape, int dtype) {
  Type et = n.elementType(dtype);
  if (!llvm::isa<FloatType>(et))
    n.fail("dtype must be floating point");
  n.setOutput(0, emitRandomUniform(n, shape, et, n.attrFloat("low", 0.0), n.attrFloat("high", 1.0)));
}

void importRandomUniform(NodeImporter &n) {
  emitRandomUniform(n, n.attrInts("shape"), n.attrInt("dtype", onnx::TensorProto_DataType_FLOAT));
}

void importRandomUniformLike(NodeImporter &n) {
  auto in = n.inputType(0);
  int dtype = n.hasAttr("dtype") ? (int)n.attrInt("dtype") : onnx::TensorProto_DataType_FLOAT;
  if (!n.hasAttr("dtype") && !llvm::isa<FloatType>(in.getElementType()))
    n.fail("needs a floating-point dtype attribute for a non-float input");
  if (!n.hasAttr("dtype")) {
    Type et = in.getElementType();
    dtype = et.isF64() ? onnx::TensorProto_DataType_DOUBLE
            : et.isF16() ? onnx::TensorProto_DataType_FLOAT16
            : et.isBF16() ? onnx::TensorProto_DataType_BFLOAT16
                          : onnx::TensorProto_DataType_FLOAT;
  }
  emitRandomUniform(n, n.inputShape(0), dtype);
}

/// Dropout: in training mode each element is kept when its uniform draw is >= ratio and scaled
/// by 1 / (1 - ratio). The draws depend on (seed, step, op, the element's index in the global
/// tensor) only, so every parallel layout drops the same elements (docs/random.md).
void importDropout(NodeImporter &n) {
  double ratio = n.hasInput(1) ? n.requireConstScalar(1, "ratio").getDouble(0) : n.attrFloat("ratio", 0.5);
  bool training = n.hasInput(2) && n.requireConstScalar(2, "training_mode").getInt(0) != 0;
  if (!(ratio >= 0 && ratio <= 1))
    n.fail("ratio must be in [0, 1], got " + std::to_string(ratio));
  bool maskWanted = n.node().output_size() > 1 && !n.node().output(1).empty();
  if (!training || ratio == 0) {
    n.setOutput(0, n.inputValue(0));
    if (maskWanted) {
      ConstTensor ones(onnx::TensorProto_DataType_BOOL, n.inputShape(0));
      n.setOutput(1, ones.map(onnx::TensorProto_DataType_BOOL, [](double) { return 1.0; }));
    }
    return;
  }
  Type et = n.inputType(0).getElementType();
  if (!llvm::isa<FloatType>(et))
    n.fail("training-mode dropout of a non-float tensor");
  Value draws = emitRandomUniform(n, n.inputShape(0), n.builder().getF32Type(), 0.0, 1.0);
  Value kept = n.emit1<GreaterEqualOp>({draws, n.scalar(ratio, n.builder().getF32Type())});
  double scale = ratio < 1 ? 1.0 / (1.0 - ratio) : 0.0;
  Value factor = n.emit1<WhereOp>({kept, n.scalar(scale, et), n.scalar(0.0, et)});
  n.setOutput(0, n.emit1<MulOp>({n.input(0), factor}));
  if (maskWanted)
    n.setOutput(1, kept);
}

} // namespace

void registerNeuralHandlers(HandlerRegistry &r) {
  r.add("MatMul", importMatMul);
  r.add("Gemm", importGemm);
  r.add("Conv", importConv);
  r.add("LayerNormalization", importLayerNormalization, 17);
  r.add("Softmax", importSoftmax, 13);
  r.add("Einsum", importEinsum);
  r.add("TopK", importTopK);
  r.add("GatherElements", importGatherElements);
  r.add("ScatterND", importScatterND, 1, kNewestOpset);
  r.add("RandomUniform", importRandomUniform);
  r.add("RandomUniformLike", importRandomUniformLike);
  r.add("Dropout", importDropout);
}

} // namespace cpc::onnx_import
