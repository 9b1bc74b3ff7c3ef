//===- Checks.cpp - each op's operand checks, shared by its CPU and CUDA kernels ===//
#include "kernels/Checks.h"
#include "kernels/Float16.h"
#include "kernels/Kernel.h"
#include "support/ShapeMath.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace cpc::kernels {
namespace {

/// The axis attribute in [-rank, rank), made non-negative (gather, topk, argsort, concat).
int64_t wrappedAxis(const KernelContext &ctx, int64_t rank) {
  int64_t axis = ctx.attrs.axis, a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank)
    ctx.fail("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  return a;
}

/// The axis of a row-wise op or a gradient: in [0, rank), or also [-rank, 0) when
/// `negativeAllowed` (the gradients'), made non-negative.
int64_t rowAxis(const KernelContext &ctx, int64_t rank, bool negativeAllowed) {
  int64_t axis = ctx.attrs.axis;
  if (negativeAllowed && axis < 0)
    axis += rank;
  if (axis < 0 || axis >= rank)
    ctx.fail("axis " + std::to_string(ctx.attrs.axis) + " out of range for rank " + std::to_string(rank));
  return axis;
}

/// An integer type's value for a float, saturating (infinities to the limits, NaN 0).
template <typename I> I saturate(double value) {
  if (std::isnan(value))
    return I(0);
  if (value <= double(std::numeric_limits<I>::min()))
    return std::numeric_limits<I>::min();
  if (value >= double(std::numeric_limits<I>::max()))
    return std::numeric_limits<I>::max();
  return I(value);
}

} // namespace

//===----------------------------------------------------------------------===//
// Shared by many ops
//===----------------------------------------------------------------------===//

void checkShape(const KernelContext &ctx, const TensorRef &out, const shapes::Inferred &expected) {
  if (!expected.ok())
    ctx.fail(expected.error);
  if (out.shape != expected.shape)
    ctx.fail("result " + shapes::str(out.shape) + " should be " + shapes::str(expected.shape));
}

void checkArity(const KernelContext &ctx, size_t inputs, size_t outputs) {
  if (ctx.inputs.size() != inputs || ctx.outputs.size() != outputs)
    ctx.fail("expected " + std::to_string(inputs) + " inputs and " + std::to_string(outputs) + " outputs, got " +
             std::to_string(ctx.inputs.size()) + " and " + std::to_string(ctx.outputs.size()));
}

void checkSame(const KernelContext &ctx, const TensorRef &t, const TensorRef &like, const char *what) {
  if (t.dtype != like.dtype || t.shape != like.shape)
    ctx.fail(std::string(what) + " is " + dtypeName(t.dtype) + shapeString(t.shape) + ", expected " +
             dtypeName(like.dtype) + shapeString(like.shape));
}

void checkOutput(const KernelContext &ctx, DType dtype, const std::vector<int64_t> *shape) {
  const TensorRef &out = ctx.outputs[0];
  if (out.dtype != dtype)
    ctx.fail(std::string("output element type ") + dtypeName(out.dtype) + ", expected " + dtypeName(dtype));
  if (shape && *shape != out.shape)
    ctx.fail("output shape " + shapeString(out.shape) + ", expected " + shapeString(*shape));
}

void checkOneToOne(const KernelContext &ctx) {
  if (ctx.inputs.size() != 1 || ctx.outputs.size() != 1)
    ctx.fail("expects 1 input and 1 output");
  if (ctx.inputs[0].dtype != ctx.outputs[0].dtype)
    ctx.fail("input and result element types differ");
}

//===----------------------------------------------------------------------===//
// Elementwise ops
//===----------------------------------------------------------------------===//

void checkCast(const KernelContext &ctx) {
  checkArity(ctx, 1, 1);
  const TensorRef &in = ctx.inputs[0], &out = ctx.outputs[0];
  if (in.shape != out.shape)
    ctx.fail("output shape " + shapeString(out.shape) + " differs from input " + shapeString(in.shape));
}

void checkBinary(const KernelContext &ctx) {
  checkArity(ctx, 2, 1);
  const TensorRef &lhs = ctx.inputs[0], &rhs = ctx.inputs[1];
  if (lhs.dtype != rhs.dtype)
    ctx.fail(std::string("operand element types differ: ") + dtypeName(lhs.dtype) + " and " + dtypeName(rhs.dtype));
  checkShape(ctx, ctx.outputs[0], shapes::broadcast(lhs.shape, rhs.shape));
}

void checkWhere(const KernelContext &ctx) {
  checkArity(ctx, 3, 1);
  const TensorRef &cond = ctx.inputs[0], &x = ctx.inputs[1], &y = ctx.inputs[2];
  if (cond.dtype != DType::I1)
    ctx.fail(std::string("condition must be i1, got ") + dtypeName(cond.dtype));
  if (x.dtype != y.dtype)
    ctx.fail(std::string("branch element types differ: ") + dtypeName(x.dtype) + " and " + dtypeName(y.dtype));
}

void checkGeluGrad(const KernelContext &ctx) {
  checkArity(ctx, 2, 1);
  const TensorRef &x = ctx.inputs[0];
  checkSame(ctx, ctx.inputs[1], x, "grad");
  checkSame(ctx, ctx.outputs[0], x, "result");
}

template <size_t N>
bool collapseBroadcast(const std::vector<int64_t> &out, const std::array<const std::vector<int64_t> *, N> &operands,
                       BroadcastPlan<N> &plan, std::string *error) {
  size_t rank = out.size();
  std::vector<std::array<int64_t, N>> strides(rank);
  for (size_t k = 0; k < N; ++k) {
    const std::vector<int64_t> &s = *operands[k];
    if (s.size() > rank) {
      *error = "operand " + shapeString(s) + " has a higher rank than the result " + shapeString(out);
      return false;
    }
    int64_t stride = 1;
    size_t lead = rank - s.size();
    for (size_t d = rank; d-- > 0;) {
      int64_t dim = d >= lead ? s[d - lead] : 1;
      if (dim == out[d]) {
        strides[d][k] = dim == 1 ? 0 : stride;
      } else if (dim == 1) {
        strides[d][k] = 0;
      } else {
        *error = "operand " + shapeString(s) + " does not broadcast to " + shapeString(out);
        return false;
      }
      stride *= dim;
    }
  }
  plan = BroadcastPlan<N>{};
  for (size_t d = 0; d < rank; ++d) {
    if (out[d] == 1)
      continue;
    bool merge = !plan.shape.empty();
    for (size_t k = 0; k < N && merge; ++k)
      merge = plan.strides.back()[k] == strides[d][k] * out[d];
    if (merge) {
      plan.shape.back() *= out[d];
      plan.strides.back() = strides[d];
    } else {
      plan.shape.push_back(out[d]);
      plan.strides.push_back(strides[d]);
    }
  }
  if (plan.shape.empty()) {
    plan.shape.push_back(1);
    plan.strides.push_back({});
  }
  return true;
}

template <size_t N>
BroadcastPlan<N> checkBroadcastOperands(const KernelContext &ctx,
                                        const std::array<const std::vector<int64_t> *, N> &operands) {
  BroadcastPlan<N> plan;
  std::string error;
  if (!collapseBroadcast<N>(ctx.outputs[0].shape, operands, plan, &error))
    ctx.fail(error);
  return plan;
}

// Binary ops and where.
template bool collapseBroadcast<2>(const std::vector<int64_t> &, const std::array<const std::vector<int64_t> *, 2> &,
                                   BroadcastPlan<2> &, std::string *);
template bool collapseBroadcast<3>(const std::vector<int64_t> &, const std::array<const std::vector<int64_t> *, 3> &,
                                   BroadcastPlan<3> &, std::string *);
template BroadcastPlan<2> checkBroadcastOperands<2>(const KernelContext &,
                                                    const std::array<const std::vector<int64_t> *, 2> &);
template BroadcastPlan<3> checkBroadcastOperands<3>(const KernelContext &,
                                                    const std::array<const std::vector<int64_t> *, 3> &);

//===----------------------------------------------------------------------===//
// Movement ops
//===----------------------------------------------------------------------===//

std::vector<int64_t> checkTranspose(const KernelContext &ctx) {
  checkOneToOne(ctx);
  const TensorRef &in = ctx.inputs[0], &out = ctx.outputs[0];
  std::vector<int64_t> dims = ctx.attrs.permutation;
  int64_t r = in.rank();
  for (int64_t &p : dims) // negative entries count from the end (ONNX's)
    p = p < 0 ? p + r : p;
  checkShape(ctx, out, shapes::transpose(in.shape, dims));
  return dims;
}

std::vector<int64_t> checkSlice(const KernelContext &ctx) {
  checkOneToOne(ctx);
  const TensorRef &in = ctx.inputs[0], &out = ctx.outputs[0];
  const std::vector<int64_t> &starts = ctx.attrs.starts, &limits = ctx.attrs.limits, &steps = ctx.attrs.strides;
  int64_t r = in.rank();
  if ((int64_t)starts.size() != r || (int64_t)steps.size() != r || (int64_t)limits.size() != r || out.rank() != r)
    ctx.fail("starts/limits/strides need one value per dim");
  std::vector<int64_t> first(r);
  for (int64_t i = 0; i < r; ++i) {
    int64_t start = first[i] = starts[i] < 0 ? starts[i] + in.shape[i] : starts[i];
    if (steps[i] == 0)
      ctx.fail("slice stride is 0 in dim " + std::to_string(i));
    // The result's shape is fixed: its first and last elements must be inside the input.
    int64_t last = start + (out.shape[i] - 1) * steps[i];
    if (out.shape[i] > 0 && (start < 0 || start >= in.shape[i] || last < 0 || last >= in.shape[i]))
      ctx.fail("slice of dim " + std::to_string(i) + " (size " + std::to_string(in.shape[i]) + ") from " +
               std::to_string(start) + " is out of range");
  }
  return first;
}

void checkBroadcastTo(const KernelContext &ctx) {
  checkOneToOne(ctx);
  const TensorRef &in = ctx.inputs[0], &out = ctx.outputs[0];
  int64_t lead = out.rank() - in.rank();
  if (lead < 0)
    ctx.fail("cannot broadcast " + shapeString(in.shape) + " to " + shapeString(out.shape));
  for (int64_t i = 0; i < in.rank(); ++i) {
    int64_t d = in.shape[i], o = out.shape[lead + i];
    if (d != o && d != 1)
      ctx.fail("cannot broadcast " + shapeString(in.shape) + " to " + shapeString(out.shape));
  }
}

void checkReshape(const KernelContext &ctx) {
  checkOneToOne(ctx);
  if (ctx.inputs[0].numel() != ctx.outputs[0].numel())
    ctx.fail("cannot reshape " + shapeString(ctx.inputs[0].shape) + " to " + shapeString(ctx.outputs[0].shape));
}

ConcatOperands checkConcat(const KernelContext &ctx) {
  if (ctx.inputs.empty() || ctx.outputs.size() != 1)
    ctx.fail("expects at least 1 input and 1 output");
  const TensorRef &out = ctx.outputs[0];
  ConcatOperands c{wrappedAxis(ctx, out.rank()), {}};
  std::vector<std::vector<int64_t>> inputs;
  int64_t total = 0;
  for (const TensorRef &in : ctx.inputs) {
    if (in.dtype != out.dtype)
      ctx.fail("inputs must share rank and element type");
    inputs.push_back(in.shape);
    c.offsets.push_back(total);
    total += in.rank() > c.axis ? in.shape[c.axis] : 0;
  }
  checkShape(ctx, out, shapes::concat(inputs, c.axis));
  return c;
}

uint64_t checkPad(const KernelContext &ctx) {
  checkArity(ctx, 1, 1);
  const TensorRef &in = ctx.inputs[0], &out = ctx.outputs[0];
  const auto &low = ctx.attrs.lowPadding, &high = ctx.attrs.highPadding, &interior = ctx.attrs.interiorPadding;
  int64_t r = in.rank();
  if ((int64_t)low.size() != r || (int64_t)high.size() != r || (int64_t)interior.size() != r)
    ctx.fail("low, high and interior need one entry per input dim");
  std::vector<int64_t> expect(r);
  for (int64_t d = 0; d < r; ++d) {
    if (low[d] < 0 || high[d] < 0 || interior[d] < 0)
      ctx.fail("padding amounts must be >= 0");
    int64_t n = in.shape[d];
    expect[d] = low[d] + high[d] + n + std::max<int64_t>(n - 1, 0) * interior[d];
  }
  if (out.shape != expect || out.dtype != in.dtype)
    ctx.fail("result is " + std::string(dtypeName(out.dtype)) + shapeString(out.shape) + ", expected " +
             dtypeName(in.dtype) + shapeString(expect));
  return padValueBits(in.dtype, ctx.attrs.value);
}

uint64_t padValueBits(DType t, double value) {
  uint64_t bits = 0;
  auto put = [&](auto v) { std::memcpy(&bits, &v, sizeof(v)); };
  switch (t) {
  case DType::F32: put(float(value)); break;
  case DType::F64: put(value); break;
  case DType::F16: put(_Float16(value)); break; // GCC >= 12, clang >= 15 on x86: one rounding from f64
  case DType::BF16: put(floatToBF16(float(value))); break;
  case DType::I64: put(saturate<int64_t>(value)); break;
  case DType::I32: put(saturate<int32_t>(value)); break;
  case DType::I16: put(saturate<int16_t>(value)); break;
  case DType::I8: put(saturate<int8_t>(value)); break;
  case DType::U8: put(saturate<uint8_t>(value)); break;
  case DType::I1: put(uint8_t(value != 0)); break;
  }
  return bits;
}

//===----------------------------------------------------------------------===//
// Indexing ops
//===----------------------------------------------------------------------===//

int64_t checkGather(const KernelContext &ctx) {
  if (ctx.inputs.size() != 2 || ctx.outputs.size() != 1)
    ctx.fail("expects data, indices and 1 output");
  const TensorRef &data = ctx.inputs[0], &indices = ctx.inputs[1], &out = ctx.outputs[0];
  int64_t axis = wrappedAxis(ctx, data.rank());
  if (out.dtype != data.dtype)
    ctx.fail("the result's element type is not the data's");
  checkShape(ctx, out, shapes::gather(data.shape, indices.shape, axis));
  return axis;
}

int64_t checkGatherElements(const KernelContext &ctx) {
  if (ctx.inputs.size() != 2 || ctx.outputs.size() != 1)
    ctx.fail("expects data, indices and 1 output");
  const TensorRef &data = ctx.inputs[0], &indices = ctx.inputs[1], &out = ctx.outputs[0];
  int64_t r = data.rank(), axis = wrappedAxis(ctx, r);
  if (indices.rank() != r || out.shape != indices.shape || out.dtype != data.dtype)
    ctx.fail("indices and result must have data's rank and the indices' shape");
  for (int64_t d = 0; d < r; ++d)
    if (d != axis && indices.shape[d] > data.shape[d])
      ctx.fail("indices " + shapeString(indices.shape) + " exceed data " + shapeString(data.shape) + " in dim " +
               std::to_string(d));
  return axis;
}

int64_t checkGatherGrad(const KernelContext &ctx) {
  checkArity(ctx, 2, 1);
  const TensorRef &grad = ctx.inputs[0], &indices = ctx.inputs[1], &out = ctx.outputs[0];
  int64_t axis = rowAxis(ctx, out.rank(), true);
  if (ctx.attrs.has(AttrId::dimSize) && ctx.attrs.dimSize != out.shape[axis])
    ctx.fail("result dim " + std::to_string(axis) + " is not dim_size " + std::to_string(ctx.attrs.dimSize));
  std::vector<int64_t> expect = shapes::gather(out.shape, indices.shape, axis).shape; // the gather's rule
  if (grad.shape != expect || grad.dtype != out.dtype)
    ctx.fail("grad is " + shapeString(grad.shape) + ", expected " + shapeString(expect) + " of the result's type");
  return axis;
}

int64_t checkGatherElementsGrad(const KernelContext &ctx) {
  checkArity(ctx, 2, 1);
  const TensorRef &grad = ctx.inputs[0], &indices = ctx.inputs[1], &out = ctx.outputs[0];
  int64_t r = out.rank(), axis = rowAxis(ctx, r, true);
  if (grad.shape != indices.shape || indices.rank() != r || grad.dtype != out.dtype)
    ctx.fail("grad must have the indices' shape and the result's rank and type");
  for (int64_t d = 0; d < r; ++d)
    if (d != axis && indices.shape[d] > out.shape[d])
      ctx.fail("indices " + shapeString(indices.shape) + " exceed result " + shapeString(out.shape) + " in dim " +
               std::to_string(d));
  return axis;
}

ScatterOperands checkScatterND(const KernelContext &ctx) {
  if (ctx.inputs.size() != 3 || ctx.outputs.size() != 1)
    ctx.fail("expects data, indices, updates and 1 output");
  const TensorRef &data = ctx.inputs[0], &indices = ctx.inputs[1], &updates = ctx.inputs[2], &out = ctx.outputs[0];
  if (out.shape != data.shape || out.dtype != data.dtype || updates.dtype != data.dtype)
    ctx.fail("result and updates must match data");
  if (indices.rank() < 1)
    ctx.fail("indices must have rank >= 1");
  int64_t q = indices.shape.back(), r = data.rank();
  if (q > r)
    ctx.fail("index tuples of length " + std::to_string(q) + " exceed data rank " + std::to_string(r));
  std::vector<int64_t> expect(indices.shape.begin(), indices.shape.end() - 1);
  expect.insert(expect.end(), data.shape.begin() + q, data.shape.end());
  if (updates.shape != expect)
    ctx.fail("updates " + shapeString(updates.shape) + " should be " + shapeString(expect));
  ScatterReduction reduction = ctx.attrs.reduction; // validated when decoded
  if (data.dtype == DType::I1) // logical or / and, keeping the bytes 0 or 1
    reduction = reduction == ScatterReduction::Add   ? ScatterReduction::Max
                : reduction == ScatterReduction::Mul ? ScatterReduction::Min
                                                     : reduction;
  return {q, reduction};
}

TopKOperands checkTopK(const KernelContext &ctx) {
  if (ctx.inputs.size() != 1 || ctx.outputs.size() != 2)
    ctx.fail("expects 1 input and 2 outputs (values, indices)");
  const TensorRef &in = ctx.inputs[0];
  if (in.rank() == 0)
    ctx.fail("input must have rank >= 1");
  int64_t axis = wrappedAxis(ctx, in.rank()), k = ctx.attrs.k;
  if (k < 0 || k > in.shape[axis])
    ctx.fail("k=" + std::to_string(k) + " is out of range for dim " + std::to_string(axis) + " of size " +
             std::to_string(in.shape[axis]));
  std::vector<int64_t> expect = in.shape;
  expect[axis] = k;
  if (ctx.outputs[0].shape != expect || ctx.outputs[1].shape != expect || ctx.outputs[0].dtype != in.dtype ||
      ctx.outputs[1].dtype != DType::I64)
    ctx.fail("results must be " + shapeString(expect) + " values and i64 indices");
  return {axis, k};
}

int64_t checkArgsort(const KernelContext &ctx) {
  if (ctx.inputs.size() != 1 || ctx.outputs.size() != 1)
    ctx.fail("expects 1 input and 1 output");
  const TensorRef &in = ctx.inputs[0];
  if (in.rank() == 0)
    ctx.fail("input must have rank >= 1");
  int64_t axis = wrappedAxis(ctx, in.rank());
  if (ctx.outputs[0].shape != in.shape || ctx.outputs[0].dtype != DType::I64)
    ctx.fail("result must be i64 with the input's shape");
  return axis;
}

//===----------------------------------------------------------------------===//
// Row-wise ops
//===----------------------------------------------------------------------===//

namespace {
/// The axis of a LayerNorm of inputs[0], and its scale and bias (inputs scaleInput and the next)
/// of the normalized shape.
int64_t layerNormScaleAndBias(const KernelContext &ctx, size_t scaleInput) {
  const TensorRef &in = ctx.inputs[0];
  int64_t axis = rowAxis(ctx, in.rank(), false);
  TensorRef normalized{nullptr, in.dtype, std::vector<int64_t>(in.shape.begin() + axis, in.shape.end())};
  checkSame(ctx, ctx.inputs[scaleInput], normalized, "scale");
  checkSame(ctx, ctx.inputs[scaleInput + 1], normalized, "bias");
  return axis;
}
} // namespace

int64_t checkLayerNorm(const KernelContext &ctx) {
  if (ctx.inputs.size() != 3 || ctx.outputs.size() != 1)
    ctx.fail("expected 3 inputs (input, scale, bias) and 1 output");
  checkSame(ctx, ctx.outputs[0], ctx.inputs[0], "output");
  return layerNormScaleAndBias(ctx, 1);
}

int64_t checkAddLayerNorm(const KernelContext &ctx) {
  checkArity(ctx, 4, 2);
  const TensorRef &in = ctx.inputs[0];
  checkSame(ctx, ctx.inputs[1], in, "rhs");
  checkSame(ctx, ctx.outputs[0], in, "sum");
  checkSame(ctx, ctx.outputs[1], in, "result");
  return layerNormScaleAndBias(ctx, 2);
}

int64_t checkSoftmax(const KernelContext &ctx) {
  if (ctx.inputs.size() != 1 || ctx.outputs.size() != 1)
    ctx.fail("expected 1 input and 1 output");
  const TensorRef &in = ctx.inputs[0];
  int64_t axis = rowAxis(ctx, in.rank(), false);
  checkSame(ctx, ctx.outputs[0], in, "output");
  return axis;
}

int64_t checkSoftmaxGrad(const KernelContext &ctx) {
  checkArity(ctx, 2, 1);
  const TensorRef &y = ctx.inputs[0];
  checkSame(ctx, ctx.inputs[1], y, "grad");
  checkSame(ctx, ctx.outputs[0], y, "result");
  return rowAxis(ctx, y.rank(), true);
}

namespace {
AttentionDims attentionDims(const KernelContext &ctx) {
  const TensorRef &q = ctx.inputs[0], &k = ctx.inputs[1], &v = ctx.inputs[2];
  const bool tokenMajor = ctx.attrs.layout == AttentionLayout::TokenMajor;
  const int64_t rank = q.rank(), matrixDims = tokenMajor ? 3 : 2; // [N, D] or [N, H, D]
  if (rank < matrixDims || k.rank() != rank || v.rank() != rank)
    ctx.fail("q, k and v must have one rank >= " + std::to_string(matrixDims));
  if (!isFloatDType(q.dtype) || k.dtype != q.dtype || v.dtype != q.dtype)
    ctx.fail("q, k and v must have one float element type");
  std::vector<int64_t> batch(q.shape.begin(), q.shape.end() - matrixDims);
  if (!std::equal(batch.begin(), batch.end(), k.shape.begin()) || !std::equal(batch.begin(), batch.end(), v.shape.begin()))
    ctx.fail("q, k and v must have the same batch dims");
  AttentionDims dims;
  dims.n = q.shape[rank - matrixDims];
  dims.m = k.shape[rank - matrixDims];
  dims.d = q.shape[rank - 1];
  dims.dv = v.shape[rank - 1];
  dims.tokenMajor = tokenMajor;
  dims.heads = tokenMajor ? q.shape[rank - 2] : 1;
  dims.batch = numElements(batch) * dims.heads;
  if (k.shape[rank - 1] != dims.d || v.shape[rank - matrixDims] != dims.m ||
      (tokenMajor && (k.shape[rank - 2] != dims.heads || v.shape[rank - 2] != dims.heads)))
    ctx.fail(tokenMajor ? "k must be [..., M, H, D] and v [..., M, H, Dv] for q [..., N, H, D]"
                        : "k must be [..., M, D] and v [..., M, Dv] for q [..., N, D]");
  return dims;
}

/// q's shape with the last dim `last`: attention's result (Dv), and its gradient's.
TensorRef withLastDim(const KernelContext &ctx, int64_t last) {
  TensorRef t{nullptr, ctx.inputs[0].dtype, ctx.inputs[0].shape};
  t.shape.back() = last;
  return t;
}

/// The probabilities: [..., N, M], or [..., H, N, M] for token-major operands.
TensorRef probabilitiesOf(const KernelContext &ctx, const AttentionDims &dims) {
  const TensorRef &q = ctx.inputs[0];
  TensorRef t{nullptr, q.dtype, std::vector<int64_t>(q.shape.begin(), q.shape.end() - (dims.tokenMajor ? 3 : 2))};
  if (dims.tokenMajor)
    t.shape.push_back(dims.heads);
  t.shape.insert(t.shape.end(), {dims.n, dims.m});
  return t;
}
} // namespace

AttentionDims checkAttention(const KernelContext &ctx) {
  checkArity(ctx, 3, 2);
  AttentionDims dims = attentionDims(ctx);
  checkSame(ctx, ctx.outputs[0], withLastDim(ctx, dims.dv), "result");
  checkSame(ctx, ctx.outputs[1], probabilitiesOf(ctx, dims), "probabilities");
  return dims;
}

AttentionDims checkAttentionGrad(const KernelContext &ctx) {
  checkArity(ctx, 5, 3);
  AttentionDims dims = attentionDims(ctx);
  checkSame(ctx, ctx.inputs[3], probabilitiesOf(ctx, dims), "probabilities");
  checkSame(ctx, ctx.inputs[4], withLastDim(ctx, dims.dv), "grad");
  checkSame(ctx, ctx.outputs[0], ctx.inputs[0], "q_grad");
  checkSame(ctx, ctx.outputs[1], ctx.inputs[1], "k_grad");
  checkSame(ctx, ctx.outputs[2], ctx.inputs[2], "v_grad");
  return dims;
}

namespace {
/// layer_norm_grad's operands after the arity check: input, scale, grad -> 3 gradients.
int64_t layerNormGradShapes(const KernelContext &ctx) {
  const TensorRef &x = ctx.inputs[0];
  int64_t axis = rowAxis(ctx, x.rank(), true);
  TensorRef normalized{nullptr, x.dtype, std::vector<int64_t>(x.shape.begin() + axis, x.shape.end())};
  checkSame(ctx, ctx.inputs[2], x, "grad");
  checkSame(ctx, ctx.inputs[1], normalized, "scale");
  checkSame(ctx, ctx.outputs[0], x, "input_grad");
  checkSame(ctx, ctx.outputs[1], normalized, "scale_grad");
  checkSame(ctx, ctx.outputs[2], normalized, "bias_grad");
  return axis;
}
} // namespace

int64_t checkLayerNormGrad(const KernelContext &ctx) {
  checkArity(ctx, 3, 3);
  return layerNormGradShapes(ctx);
}

int64_t checkLayerNormGradAdd(const KernelContext &ctx) {
  checkArity(ctx, 4, 3);
  checkSame(ctx, ctx.inputs[3], ctx.inputs[0], "addend");
  return layerNormGradShapes(ctx);
}

//===----------------------------------------------------------------------===//
// matmul, adamw, random_uniform
//===----------------------------------------------------------------------===//

bool matmulShape(const std::vector<int64_t> &lhs, const std::vector<int64_t> &rhs, const std::vector<int64_t> &out,
                 bool transposeLhs, bool transposeRhs, MatmulShape &shape, std::string *error) {
  shapes::Inferred expected = shapes::matmul(lhs, rhs, transposeLhs, transposeRhs); // the dialect's rule
  if (!expected.ok()) {
    *error = expected.error;
    return false;
  }
  std::vector<int64_t> a = lhs, b = rhs;
  if (transposeLhs)
    std::swap(a[a.size() - 1], a[a.size() - 2]);
  if (transposeRhs)
    std::swap(b[b.size() - 1], b[b.size() - 2]);
  if (a.size() == 1)
    a.insert(a.begin(), 1);
  if (b.size() == 1)
    b.push_back(1);
  MatmulShape s;
  s.M = a[a.size() - 2], s.K = a.back(), s.N = b.back();
  s.lhsBatch.assign(a.begin(), a.end() - 2);
  s.rhsBatch.assign(b.begin(), b.end() - 2);
  size_t rank = std::max(s.lhsBatch.size(), s.rhsBatch.size());
  s.lhsBatch.insert(s.lhsBatch.begin(), rank - s.lhsBatch.size(), 1);
  s.rhsBatch.insert(s.rhsBatch.begin(), rank - s.rhsBatch.size(), 1);
  s.batch.resize(rank);
  for (size_t i = 0; i < rank; ++i)
    s.batch[i] = std::max(s.lhsBatch[i], s.rhsBatch[i]);
  // A result of the rule's element count: a rank-1 operand's dim may be kept as 1 (a view).
  if (numElements(out) != numElements(expected.shape)) {
    *error = "result " + shapeString(out) + " does not match the operands' " + shapeString(expected.shape);
    return false;
  }
  shape = std::move(s);
  return true;
}

MatmulShape checkMatmul(const KernelContext &ctx) {
  MatmulShape shape;
  std::string error;
  if (!matmulShape(ctx.inputs[0].shape, ctx.inputs[1].shape, ctx.outputs[0].shape, ctx.attrs.transposeLhs,
                   ctx.attrs.transposeRhs, shape, &error))
    ctx.fail(error);
  return shape;
}

void checkAdamW(const KernelContext &ctx) {
  if (ctx.inputs.size() < 6 || ctx.inputs.size() > 7 || ctx.outputs.size() != 3)
    ctx.fail("expects 6 or 7 inputs (param, grad, exp_avg, exp_avg_sq, lr, step[, grad_scale]) and 3 outputs");
  if (ctx.inputs.size() == 7 && (ctx.inputs[6].numel() != 1 || ctx.inputs[6].dtype != ctx.inputs[0].dtype))
    ctx.fail("grad_scale must be a single value of the gradient's type, got " + std::string(dtypeName(ctx.inputs[6].dtype)) +
             shapeString(ctx.inputs[6].shape));
  const TensorRef &param = ctx.inputs[0];
  static const char *names[] = {"param", "grad", "exp_avg", "exp_avg_sq", "new_param", "new_exp_avg", "new_exp_avg_sq"};
  for (int k = 1; k < 7; ++k) {
    const TensorRef &t = k < 4 ? ctx.inputs[k] : ctx.outputs[k - 4];
    if (t.dtype != param.dtype || t.shape != param.shape)
      ctx.fail(std::string(names[k]) + " is " + dtypeName(t.dtype) + shapeString(t.shape) + ", expected " +
               dtypeName(param.dtype) + shapeString(param.shape));
  }
}

size_t checkMultiTensorAdamW(const KernelContext &ctx) {
  if (ctx.inputs.size() < 3 || (ctx.inputs.size() - 3) % 4 != 0)
    ctx.fail("expects lr, step, grad_scale and 4 N tensors (params, grads, exp_avg, exp_avg_sq), got " +
             std::to_string(ctx.inputs.size()) + " inputs");
  size_t n = (ctx.inputs.size() - 3) / 4;
  if (ctx.outputs.size() != 3 * n)
    ctx.fail("expects 3 N = " + std::to_string(3 * n) + " outputs, got " + std::to_string(ctx.outputs.size()));
  if (ctx.attrs.weightDecays.size() != n)
    ctx.fail("expects " + std::to_string(n) + " weight_decays, got " + std::to_string(ctx.attrs.weightDecays.size()));
  for (int s = 0; s < 3; ++s)
    if (ctx.inputs[s].numel() != 1)
      ctx.fail(std::string(s == 0 ? "lr" : s == 1 ? "step" : "grad_scale") + " must be a single value, got " +
               shapeString(ctx.inputs[s].shape));
  for (size_t i = 0; i < n; ++i) {
    const TensorRef &p = ctx.inputs[3 + i];
    for (const TensorRef *t : {&ctx.inputs[3 + n + i], &ctx.inputs[3 + 2 * n + i], &ctx.inputs[3 + 3 * n + i],
                               &ctx.outputs[i], &ctx.outputs[n + i], &ctx.outputs[2 * n + i]})
      if (t->dtype != p.dtype || t->shape != p.shape)
        ctx.fail("tensor " + std::to_string(i) + ": " + dtypeName(t->dtype) + shapeString(t->shape) + ", expected " +
                 dtypeName(p.dtype) + shapeString(p.shape) + " as its param");
    if (ctx.inputs[2].dtype != p.dtype)
      ctx.fail("grad_scale must have the tensors' element type (" + std::string(dtypeName(p.dtype)) + ")");
  }
  return n;
}

void checkRandomUniform(const KernelContext &ctx) {
  if (!ctx.inputs.empty() || ctx.outputs.size() != 1)
    ctx.fail("expected no inputs and 1 output");
  if (!(ctx.attrs.low <= ctx.attrs.high))
    ctx.fail("low must not exceed high");
}

} // namespace cpc::kernels
