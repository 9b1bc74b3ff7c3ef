//===- Checks.h - each op's operand checks, shared by its CPU and CUDA kernels ===//
//
// One place per op for what its kernels verify before they compute: arity, element types,
// shapes and attributes, failing through ctx.fail with the messages users and tests see. A
// check returns what both kernels go on to use (a normalized axis or permutation, slice starts,
// concat offsets, ...). Plain C++: the CUDA kernels' host code calls the same functions.
//
// Checks that only one device needs stay with its kernel: the CPU's on index values (the GPU
// would have to wait for them), the GPU's on its kernels' limits (dims, sort lengths).
//
#ifndef CPC_KERNELS_CHECKS_H
#define CPC_KERNELS_CHECKS_H

#include "kernels/OpAttrs.h"
#include "kernels/Tensor.h"
#include "support/ShapeMath.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace cpc::kernels {

struct KernelContext;

//===----------------------------------------------------------------------===//
// Shared by many ops
//===----------------------------------------------------------------------===//

/// The dialect's shape rule held for output `out`: no error, and exactly its shape.
void checkShape(const KernelContext &ctx, const TensorRef &out, const shapes::Inferred &expected);
/// Exactly `inputs` inputs and `outputs` outputs.
void checkArity(const KernelContext &ctx, size_t inputs, size_t outputs);
/// `t` has the element type and shape of `like`; `what` names `t` in the message.
void checkSame(const KernelContext &ctx, const TensorRef &t, const TensorRef &like, const char *what);
/// Output 0 has element type `dtype` and, when `shape` is given, that shape.
void checkOutput(const KernelContext &ctx, DType dtype, const std::vector<int64_t> *shape);
/// One input and one output of the same element type (the movement ops).
void checkOneToOne(const KernelContext &ctx);

//===----------------------------------------------------------------------===//
// Elementwise ops
//===----------------------------------------------------------------------===//

/// cast: one input, one output of the same shape.
void checkCast(const KernelContext &ctx);
/// Binary ops: two operands of one element type (the result's type is checked per op).
void checkBinary(const KernelContext &ctx);
/// where: an i1 condition and two branches of one element type.
void checkWhere(const KernelContext &ctx);
/// gelu_grad: input, grad and result of one type and shape.
void checkGeluGrad(const KernelContext &ctx);

/// N operands broadcast (numpy rules) to a result: its dims, each with every operand's element
/// stride along it (0 where the operand broadcasts). Size-1 dims are dropped and neighbours
/// merged wherever every operand allows, so equal shapes and scalars become one dim and the
/// innermost stride of each operand is 0 or 1. At least one dim ([1] for a scalar result).
template <size_t N> struct BroadcastPlan {
  std::vector<int64_t> shape;
  std::vector<std::array<int64_t, N>> strides;
};
/// The plan of `operands` (shapes) broadcast to `out`; false with `error` set when one has a
/// higher rank than `out` or does not broadcast to it. Defined for N = 2 and 3.
template <size_t N>
bool collapseBroadcast(const std::vector<int64_t> &out, const std::array<const std::vector<int64_t> *, N> &operands,
                       BroadcastPlan<N> &plan, std::string *error);
/// The same for output 0's shape, failing the step on an error.
template <size_t N>
BroadcastPlan<N> checkBroadcastOperands(const KernelContext &ctx,
                                        const std::array<const std::vector<int64_t> *, N> &operands);

//===----------------------------------------------------------------------===//
// Movement ops
//===----------------------------------------------------------------------===//

/// transpose: the permutation with negative entries wrapped (result dim i is input dim perm[i]).
std::vector<int64_t> checkTranspose(const KernelContext &ctx);
/// slice: each dim's start with negatives wrapped; the result's first and last element of
/// every non-empty dim lie inside the input.
std::vector<int64_t> checkSlice(const KernelContext &ctx);
/// broadcast: the input broadcasts (numpy rules) to the result's shape.
void checkBroadcastTo(const KernelContext &ctx);
/// reshape (and the other plain copies): as many result elements as input elements.
void checkReshape(const KernelContext &ctx);

struct ConcatOperands {
  int64_t axis;                 // non-negative
  std::vector<int64_t> offsets; // each input's start along the axis in the result
};
ConcatOperands checkConcat(const KernelContext &ctx);

/// pad: the result's shape from low, high and interior padding; returns the pad value's bytes
/// in the element type (what every padded position holds).
uint64_t checkPad(const KernelContext &ctx);
/// The bytes of `value` in element type `t`: floats rounded once, integers saturated (NaN 0).
uint64_t padValueBits(DType t, double value);

//===----------------------------------------------------------------------===//
// Indexing ops: each returns the axis, made non-negative
//===----------------------------------------------------------------------===//

int64_t checkGather(const KernelContext &ctx);
int64_t checkGatherElements(const KernelContext &ctx);
int64_t checkGatherGrad(const KernelContext &ctx);
int64_t checkGatherElementsGrad(const KernelContext &ctx);

struct ScatterOperands {
  int64_t tupleLength;        // q: the index tuples' length (the leading data dims they address)
  ScatterReduction reduction; // on i1 data add and mul become max and min (logical or, and)
};
ScatterOperands checkScatterND(const KernelContext &ctx);

struct TopKOperands {
  int64_t axis, k;
};
TopKOperands checkTopK(const KernelContext &ctx);
int64_t checkArgsort(const KernelContext &ctx);

//===----------------------------------------------------------------------===//
// Row-wise ops: each returns the axis the rows run along (non-negative)
//===----------------------------------------------------------------------===//

/// layer_norm and softmax take an axis in [0, rank); their gradients also a negative one.
int64_t checkLayerNorm(const KernelContext &ctx);
int64_t checkSoftmax(const KernelContext &ctx);
int64_t checkSoftmaxGrad(const KernelContext &ctx);
int64_t checkLayerNormGrad(const KernelContext &ctx);
/// layer_norm_grad_add: layer_norm_grad's operands and an addend of the input's shape.
int64_t checkLayerNormGradAdd(const KernelContext &ctx);
/// add_layer_norm (lhs, rhs, scale, bias -> sum, result): lhs and rhs of one shape.
int64_t checkAddLayerNorm(const KernelContext &ctx);

/// attention (q, k, v -> result, probabilities) and attention_grad (q, k, v, probabilities,
/// grad -> dq, dk, dv): q [..., N, D], k [..., M, D] and v [..., M, Dv] of one float type and
/// batch dims, seen as `batch` slices; probabilities [..., N, M]. In the token-major layout
/// ("bnhd") q is [..., N, H, D], k [..., M, H, D], v [..., M, H, Dv] (each token's heads side by
/// side, as a Linear writes them), the result [..., N, H, Dv] and the probabilities
/// [..., H, N, M]: slice b is head b % H of batch b / H, its rows H x width elements apart.
struct AttentionDims {
  int64_t batch = 0, n = 0, m = 0, d = 0, dv = 0;
  bool tokenMajor = false;
  int64_t heads = 1; // H when token-major

  /// Element offset of slice b's first row in q, k, v, the result or a gradient (`rows` rows of
  /// `width` per slice); the probabilities are plain [batch, n, m].
  int64_t sliceOffset(int64_t b, int64_t rows, int64_t width) const {
    return tokenMajor ? (b / heads) * rows * heads * width + (b % heads) * width : b * rows * width;
  }
  /// Elements between consecutive rows of a slice of `width` columns.
  int64_t rowStride(int64_t width) const { return tokenMajor ? heads * width : width; }
};
AttentionDims checkAttention(const KernelContext &ctx);
AttentionDims checkAttentionGrad(const KernelContext &ctx);

//===----------------------------------------------------------------------===//
// matmul, adamw, random_uniform
//===----------------------------------------------------------------------===//

/// cpc.matmul's problem after rank-1 operands are promoted and the transposes applied:
/// M x K times K x N for every result batch. The batch dims are padded to one rank.
struct MatmulShape {
  int64_t M = 0, N = 0, K = 0;
  std::vector<int64_t> lhsBatch, rhsBatch, batch; // batch: the result's (numpy broadcasting)
};
/// The shape of lhs x rhs -> out; false with `error` set when the operands do not multiply or
/// the result has the wrong number of elements.
bool matmulShape(const std::vector<int64_t> &lhs, const std::vector<int64_t> &rhs, const std::vector<int64_t> &out,
                 bool transposeLhs, bool transposeRhs, MatmulShape &shape, std::string *error);
/// The same for the step's operands and attributes, failing the step on an error.
MatmulShape checkMatmul(const KernelContext &ctx);

/// adamw: six inputs and three outputs; the tensors share the parameter's type and shape (lr
/// and step are checked by each kernel: the CPU reads them, the GPU cannot without waiting).
void checkAdamW(const KernelContext &ctx);
/// multi_tensor_adamw: lr, step, grad_scale (single values), then 4 N tensors (params, grads,
/// exp_avg, exp_avg_sq) and 3 N results, one type per tensor, N weight decays. Returns N.
size_t checkMultiTensorAdamW(const KernelContext &ctx);
/// random_uniform: one output, low <= high.
void checkRandomUniform(const KernelContext &ctx);

} // namespace cpc::kernels

#endif
