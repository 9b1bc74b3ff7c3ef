//===- Elementwise.cu - unary, binary, compare, where, cast and gelu(_grad) ===//
//
// One grid-stride kernel per shape of work: a map (unary ops and casts), a broadcasting binary
// op and where. The functors are ElementwiseMath.h's (shared with the host tests); f16/bf16 load
// as f32 and round once on store. Broadcasting maps each output index to operand offsets
// through the collapsed geometry of planBroadcast: equal shapes and scalar operands collapse to
// one dim (offset = index * stride, no division); other broadcasts divide per dim, in 32 bits
// whenever the element count allows. Every thread reads its own element's operands before
// writing that element and nothing else, so an output may alias a same-shaped input.
//
#include "kernels/Checks.h"
#include "kernels/cuda/CudaCommon.cuh"
#include "kernels/cuda/CudaKernels.h"
#include "kernels/cuda/ElementwiseMath.h"

#include <string>
#include <type_traits>
#include <utility>

namespace cpc::kernels {
namespace cuda {
namespace {

/// Launches `kernel` as a grid-stride loop over n elements on the step's stream.
template <typename... Params, typename... Args>
void launchOver(const KernelContext &ctx, int64_t n, void (*kernel)(Params...), Args &&...args) {
  if (n == 0)
    return;
  CudaDevice &device = deviceOf(ctx);
  LaunchConfig config = elementwiseLaunch(n, device.multiprocessors());
  kernel<<<(unsigned)config.blocks, config.threads, config.sharedBytes, device.stream()>>>(std::forward<Args>(args)...);
  checkLaunch(ctx);
}

//===----------------------------------------------------------------------===//
// Kernels.
//===----------------------------------------------------------------------===//

// y[i] = op(x[i]) in the compute types (unary ops: R = T; casts: op converts).
template <typename T, typename R, typename Op> __global__ void mapKernel(const T *x, R *y, int64_t n, Op op) {
  CPC_GRID_STRIDE(i, n) store(y, i, op(load(x, i)));
}

// How output indices become operand offsets.
enum class Indexing { Flat, Narrow, Wide };

template <Indexing M, int N>
__device__ __forceinline__ void operandOffsets(const BroadcastGeometry<N> &g, int64_t i, int64_t (&off)[N]) {
  if constexpr (M == Indexing::Flat) {
#pragma unroll
    for (int k = 0; k < N; ++k)
      off[k] = i * g.strides[0][k];
  } else if constexpr (M == Indexing::Narrow) {
    uint32_t narrow[N];
    g.template offsets<uint32_t>(uint32_t(i), narrow);
#pragma unroll
    for (int k = 0; k < N; ++k)
      off[k] = narrow[k];
  } else {
    g.template offsets<int64_t>(i, off);
  }
}

template <typename T, typename R, typename Op, Indexing M>
__global__ void binaryKernel(const T *a, const T *b, R *o, int64_t n, const __grid_constant__ BroadcastGeometry<2> g,
                             Op op) {
  CPC_GRID_STRIDE(i, n) {
    int64_t off[2];
    operandOffsets<M>(g, i, off);
    store(o, i, op(load(a, off[0]), load(b, off[1])));
  }
}

// Where selects stored values: no conversion, so 16-bit values pass through unchanged.
template <typename T, Indexing M>
__global__ void whereKernel(const bool *c, const T *a, const T *b, T *o, int64_t n,
                            const __grid_constant__ BroadcastGeometry<3> g) {
  CPC_GRID_STRIDE(i, n) {
    int64_t off[3];
    operandOffsets<M>(g, i, off);
    o[i] = c[off[0]] ? a[off[1]] : b[off[2]];
  }
}

//===----------------------------------------------------------------------===//
// Unary and cast.
//===----------------------------------------------------------------------===//

template <typename T, typename Op> void runUnary(KernelContext &ctx, Op op) {
  const TensorRef &in = ctx.inputs[0];
  checkOutput(ctx, in.dtype, &in.shape);
  launchOver(ctx, in.numel(), mapKernel<T, T, Op>, static_cast<const T *>(in.data), ctx.outputs[0].as<T>(),
             in.numel(), op);
}

template <unsigned K, typename Op> void unaryHost(KernelContext &ctx) {
  checkArity(ctx, 1, 1);
  dispatchDevice<K>(ctx, ctx.inputs[0].dtype, [&](auto tag) { runUnary<decltype(tag)>(ctx, Op{}); });
}

void geluHost(KernelContext &ctx) {
  if (ctx.attrs.approximate == GeluApproximation::Tanh)
    unaryHost<kFloat, GeluTanhOp>(ctx);
  else
    unaryHost<kFloat, GeluErfOp>(ctx);
}

// Scratch slot of an in-place narrowing cast's input copy.
constexpr int kCastSlot = 0;

void castHost(KernelContext &ctx) {
  checkCast(ctx);
  const TensorRef &in = ctx.inputs[0], &out = ctx.outputs[0];
  CudaDevice &device = deviceOf(ctx);
  if (in.dtype == out.dtype) {
    if (in.data != out.data && in.bytes() > 0)
      checkCuda(cudaMemcpyAsync(out.data, in.data, in.bytes(), cudaMemcpyDeviceToDevice, device.stream()), "cast copy");
    return;
  }
  const void *src = in.data;
  if (in.data == out.data && dtypeSize(in.dtype) != dtypeSize(out.dtype)) {
    // In place, threads would overwrite input other threads have not read: a widening cast
    // fails (as on the CPU), a narrowing one reads from a copy.
    if (dtypeSize(out.dtype) > dtypeSize(in.dtype))
      ctx.fail("cannot cast in place to a wider element type");
    if (in.bytes() == 0)
      return;
    void *copy = device.scratch(kCastSlot, in.bytes());
    checkCuda(cudaMemcpyAsync(copy, in.data, in.bytes(), cudaMemcpyDeviceToDevice, device.stream()), "cast copy");
    src = copy;
  }
  dispatchDevice<kAny>(ctx, in.dtype, [&](auto from) {
    dispatchDevice<kAny>(ctx, out.dtype, [&](auto to) {
      using F = decltype(from);
      using T = decltype(to);
      using Op = CastOp<ComputeT<T>>;
      launchOver(ctx, in.numel(), mapKernel<F, T, Op>, static_cast<const F *>(src), out.as<T>(), in.numel(), Op{});
    });
  });
}

//===----------------------------------------------------------------------===//
// Binary, compare, logical, gelu_grad, where.
//===----------------------------------------------------------------------===//

template <int N>
BroadcastGeometry<N> geometryOf(const KernelContext &ctx, const std::array<const std::vector<int64_t> *, N> &ins) {
  BroadcastGeometry<N> g;
  std::string error;
  if (!planBroadcast<N>(ctx.outputs[0].shape, ins, g, &error))
    ctx.fail(error);
  return g;
}

template <typename T, typename R, typename Op> void runBinary(KernelContext &ctx, Op op) {
  const TensorRef &lhs = ctx.inputs[0], &rhs = ctx.inputs[1], &out = ctx.outputs[0];
  int64_t n = out.numel();
  if (n == 0)
    return;
  BroadcastGeometry<2> g = geometryOf<2>(ctx, {&lhs.shape, &rhs.shape});
  const T *a = static_cast<const T *>(lhs.data), *b = static_cast<const T *>(rhs.data);
  R *o = out.as<R>();
  if (g.flat())
    launchOver(ctx, n, binaryKernel<T, R, Op, Indexing::Flat>, a, b, o, n, g, op);
  else if (fitsIndex32(n))
    launchOver(ctx, n, binaryKernel<T, R, Op, Indexing::Narrow>, a, b, o, n, g, op);
  else
    launchOver(ctx, n, binaryKernel<T, R, Op, Indexing::Wide>, a, b, o, n, g, op);
}

/// An op that can fault (one with a `fault` member: DivOp) reports to the step's device.
template <typename Op, typename = void> struct CanFault : std::false_type {};
template <typename Op> struct CanFault<Op, std::void_t<decltype(std::declval<Op &>().fault)>> : std::true_type {};
template <typename Op> Op opFor(const KernelContext &ctx) {
  Op op{};
  if constexpr (CanFault<Op>::value)
    op.fault = faultSinkOf(ctx);
  return op;
}

template <unsigned K, typename Op, bool BoolResult = false> void binaryHost(KernelContext &ctx) {
  checkBinary(ctx);
  const TensorRef &lhs = ctx.inputs[0];
  dispatchDevice<K>(ctx, lhs.dtype, [&](auto tag) {
    using T = decltype(tag);
    using R = std::conditional_t<BoolResult, bool, T>;
    checkOutput(ctx, BoolResult ? DType::I1 : lhs.dtype, nullptr);
    runBinary<T, R>(ctx, opFor<Op>(ctx));
  });
}

// gelu_grad(x, grad): same shapes and types.
void geluGradHost(KernelContext &ctx) {
  checkGeluGrad(ctx);
  dispatchDevice<kFloat>(ctx, ctx.inputs[0].dtype, [&](auto tag) {
    using T = decltype(tag);
    if (ctx.attrs.approximate == GeluApproximation::Tanh)
      runBinary<T, T>(ctx, GeluTanhGradOp{});
    else
      runBinary<T, T>(ctx, GeluErfGradOp{});
  });
}

void whereHost(KernelContext &ctx) {
  checkWhere(ctx);
  const TensorRef &cond = ctx.inputs[0], &x = ctx.inputs[1], &y = ctx.inputs[2], &out = ctx.outputs[0];
  dispatchDevice<kAny>(ctx, x.dtype, [&](auto tag) {
    using T = decltype(tag);
    checkOutput(ctx, x.dtype, nullptr);
    int64_t n = out.numel();
    if (n == 0)
      return;
    BroadcastGeometry<3> g = geometryOf<3>(ctx, {&cond.shape, &x.shape, &y.shape});
    const bool *c = static_cast<const bool *>(cond.data);
    const T *a = static_cast<const T *>(x.data), *b = static_cast<const T *>(y.data);
    T *o = out.as<T>();
    if (g.flat())
      launchOver(ctx, n, whereKernel<T, Indexing::Flat>, c, a, b, o, n, g);
    else if (fitsIndex32(n))
      launchOver(ctx, n, whereKernel<T, Indexing::Narrow>, c, a, b, o, n, g);
    else
      launchOver(ctx, n, whereKernel<T, Indexing::Wide>, c, a, b, o, n, g);
  });
}

//===----------------------------------------------------------------------===//
// Registration: one entry per element type the CPU kernel accepts (16-bit floats included
// wherever the CPU kernel widens them).
//===----------------------------------------------------------------------===//

} // namespace
} // namespace cuda

void registerCudaElementwiseKernels(KernelRegistry &r) {
  using namespace cuda;
  addFor(r, OpKind::Neg, unaryHost<kNum, NegOp>, kNum);
  addFor(r, OpKind::Abs, unaryHost<kNum, AbsOp>, kNum);
  addFor(r, OpKind::Exp, unaryHost<kFloat, ExpOp>, kFloat);
  addFor(r, OpKind::Log, unaryHost<kFloat, LogOp>, kFloat);
  addFor(r, OpKind::Sqrt, unaryHost<kFloat, SqrtOp>, kFloat);
  addFor(r, OpKind::Rsqrt, unaryHost<kFloat, RsqrtOp>, kFloat);
  addFor(r, OpKind::Reciprocal, unaryHost<kFloat, ReciprocalOp>, kFloat);
  addFor(r, OpKind::Erf, unaryHost<kFloat, ErfOp>, kFloat);
  addFor(r, OpKind::Tanh, unaryHost<kFloat, TanhOp>, kFloat);
  addFor(r, OpKind::Sin, unaryHost<kFloat, SinOp>, kFloat);
  addFor(r, OpKind::Cos, unaryHost<kFloat, CosOp>, kFloat);
  addFor(r, OpKind::Sigmoid, unaryHost<kFloat, SigmoidOp>, kFloat);
  addFor(r, OpKind::Relu, unaryHost<kFloat, ReluOp>, kFloat);
  addFor(r, OpKind::Not, unaryHost<kBool, NotOp>, kBool);
  addFor(r, OpKind::Gelu, geluHost, kFloat);
  addFor(r, OpKind::GeluGrad, geluGradHost, kFloat);
  // Looked up by the result's type; every pair of element types converts.
  addFor(r, OpKind::Cast, castHost, kAny);
  addFor(r, OpKind::Add, binaryHost<kNum, AddOp>, kNum);
  addFor(r, OpKind::Sub, binaryHost<kNum, SubOp>, kNum);
  addFor(r, OpKind::Mul, binaryHost<kNum, MulOp>, kNum);
  addFor(r, OpKind::Div, binaryHost<kNum, DivOp>, kNum);
  addFor(r, OpKind::Pow, binaryHost<kFloat, PowOp>, kFloat);
  addFor(r, OpKind::Max, binaryHost<kAny, MaxOp>, kAny);
  addFor(r, OpKind::Min, binaryHost<kAny, MinOp>, kAny);
  // Compares and logical ops are looked up by their i1 result; compares take any operand type.
  addFor(r, OpKind::Equal, binaryHost<kAny, EqualOp, true>, kBool);
  addFor(r, OpKind::Less, binaryHost<kAny, LessOp, true>, kBool);
  addFor(r, OpKind::LessEqual, binaryHost<kAny, LessEqualOp, true>, kBool);
  addFor(r, OpKind::Greater, binaryHost<kAny, GreaterOp, true>, kBool);
  addFor(r, OpKind::GreaterEqual, binaryHost<kAny, GreaterEqualOp, true>, kBool);
  addFor(r, OpKind::And, binaryHost<kBool, AndOp, true>, kBool);
  addFor(r, OpKind::Or, binaryHost<kBool, OrOp, true>, kBool);
  addFor(r, OpKind::Where, whereHost, kAny);
}

} // namespace cpc::kernels
