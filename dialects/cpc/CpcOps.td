//===- CpcOps.td - cpc operations --------------------------*- tablegen -*-===//
//
// Shape rules live in CpcOps.cpp (inferReturnTypes / verify), one function per op.
//
#ifndef CPC_OPS_TD
#define CPC_OPS_TD

include "dialects/cpc/CpcBase.td"
include "dialects/cpc/CpcAttrs.td"
include "dialects/cpc/CpcInterfaces.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"

//===----------------------------------------------------------------------===//
// Values with no operands: constants, parameters, random numbers.
//===----------------------------------------------------------------------===//

def Cpc_ConstantOp : Cpc_Op<"constant", [ConstantLike, Pure,
    AllTypesMatch<["value", "result"]>]> {
  let summary = "A compile-time tensor";
  let arguments = (ins ElementsAttr:$value);
  let results = (outs Cpc_Tensor:$result);
  let assemblyFormat = "attr-dict $value";
  let hasFolder = 1;
}

def Cpc_VariableOp : Cpc_Op<"variable", [Symbol, HasParent<"::mlir::ModuleOp">,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "A persistent variable of the model or of training: a parameter or a state";
  let description = [{
    Declares, once per module, a value that outlives a call of the module's functions; they read
    it by symbol (cpc.parameter, cpc.state) and write it (cpc.assign), as ml_program.global or
    IREE's util.global. `type` is the value every read returns (on each rank, this rank's block).

    Without `role` the variable is a model parameter (an ONNX initializer): its initial value is
    the weight of the imported model under the symbol's name. `trainable` marks parameters that
    training updates; frozen ones (e.g. MAE's fixed positional embeddings) are plain inputs to
    the step. `stored_view` and `stored_perm` say that the value is kept in another element order
    than the model's: stored = transpose(reshape(model value, stored_view), stored_perm), read as
    the model's shape (e.g. a fused qkv weight's rows in head-major order, so that a split of
    its rows gives each rank whole heads). The plan permutes the initial value and the runtime
    writes parameters back in the model's order. A parameter's moments and gradient accumulator
    say the parameter's order too (checkpoints hold every variable in the model's order).

    With `role` it is a training state (optimizer moments, gradient accumulators, loss-scaler
    state): every element starts at `init` (zero without it).

    A sharded variable carries `global_shape` and `sharding`, and every rank stores only its
    block: either a 1-D block of the flattened value (ZeRO-3: dim 0 split over the sharding's
    axes) or a block of the same rank as the global shape, each dim split over its axes (tensor
    parallelism). Examples:
    `cpc.variable @w trainable : tensor<4x8xf32>`,
    `cpc.variable @"adamw.exp_avg.w" state <exp_avg> : tensor<4x8xf32>`
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, TypeAttrOf<Cpc_Tensor>:$type, OptionalAttr<Cpc_StateRoleAttr>:$role,
                   UnitAttr:$trainable, OptionalAttr<DenseI64ArrayAttr>:$global_shape,
                   OptionalAttr<Cpc_ShardingAttr>:$sharding, OptionalAttr<DenseI64ArrayAttr>:$stored_view,
                   OptionalAttr<DenseI64ArrayAttr>:$stored_perm, OptionalAttr<F64Attr>:$init);
  let assemblyFormat = "$sym_name (`state` $role^)? (`trainable` $trainable^)? attr-dict `:` $type";
  let builders = [OpBuilder<(ins "::llvm::StringRef":$name, "::mlir::RankedTensorType":$type,
                                 "::cpc::StateRoleAttr":$role, "bool":$trainable), [{
    build($_builder, $_state, $_builder.getStringAttr(name), ::mlir::TypeAttr::get(type), role,
          trainable ? $_builder.getUnitAttr() : ::mlir::UnitAttr(), ::mlir::DenseI64ArrayAttr(), ShardingAttr(),
          ::mlir::DenseI64ArrayAttr(), ::mlir::DenseI64ArrayAttr(), ::mlir::FloatAttr());
  }]>];
  let extraClassDeclaration = [{
    ::mlir::RankedTensorType getTensorType() { return ::llvm::cast<::mlir::RankedTensorType>(getType()); }
    /// Whether the variable is a model parameter (no role) rather than a training state.
    bool isParameter() { return !getRoleAttr(); }
  }];
  let hasVerifier = 1;
}

// The reads of a variable: one op per kind of variable, so that passes find parameters and
// states by type. What the variable is (sharding, role, element order) is the variable's.
class Cpc_VariableReadOp<string mnemonic, list<Trait> traits = []>
    : Cpc_Op<mnemonic, traits # [DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let arguments = (ins FlatSymbolRefAttr:$name);
  let results = (outs Cpc_Tensor:$result);
  let assemblyFormat = "$name attr-dict `:` type($result)";
  let builders = [OpBuilder<(ins "::cpc::VariableOp":$variable), [{
    build($_builder, $_state, variable.getTensorType(), variable.getSymName());
  }]>];
  // Defined in CpcOps.cpp (VariableOp is declared after the reads).
  code variableAccessors = [{
    /// The variable read (null when the symbol names none: the verifier reports it).
    VariableOp getVariable();
    ::mlir::DenseI64ArrayAttr getGlobalShapeAttr();
    ShardingAttr getShardingAttr();
  }];
}

def Cpc_ParameterOp : Cpc_VariableReadOp<"parameter", [Pure]> {
  let summary = "Reads a model parameter (a cpc.variable without a role)";
  let description = [{
    Example: `%w = cpc.parameter @w : tensor<4x8xf32>`
  }];
  let extraClassDeclaration = variableAccessors # [{
    bool getTrainable();
    ::mlir::DenseI64ArrayAttr getStoredViewAttr();
    ::mlir::DenseI64ArrayAttr getStoredPermAttr();
  }];
}

def Cpc_RandomUniformOp : Cpc_Op<"random_uniform", [Cpc_Replayable]> {
  let summary = "Uniform random numbers in [low, high)";
  let arguments = (ins F64Attr:$low, F64Attr:$high, I64Attr:$seed);
  let results = (outs Cpc_FloatTensor:$result);
  let assemblyFormat = "attr-dict `:` type($result)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Elementwise.
//===----------------------------------------------------------------------===//

class Cpc_UnaryOp<string mnemonic, Type type, list<Trait> traits = []>
    : Cpc_Op<mnemonic, !listconcat([Pure, Elementwise, SameOperandsAndResultType], traits)> {
  let arguments = (ins type:$input);
  let results = (outs type:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

def Cpc_NegOp : Cpc_UnaryOp<"neg", Cpc_Tensor, [DeclareOpInterfaceMethods<Cpc_ShardingRuleOpInterface, ["propagatesPartial"]>, DeclareOpInterfaceMethods<Cpc_VJPOpInterface>]> { let summary = "-x"; }
def Cpc_AbsOp : Cpc_UnaryOp<"abs", Cpc_Tensor, [Cpc_ShardingRuleOpInterface, DeclareOpInterfaceMethods<Cpc_VJPOpInterface>]> { let summary = "|x|"; }
def Cpc_ExpOp : Cpc_UnaryOp<"exp", Cpc_FloatTensor, [Cpc_AutocastFullPrecision, Cpc_ShardingRuleOpInterface, DeclareOpInterfaceMethods<Cpc_VJPOpInterface>]> { let summary = "e^x"; }
def Cpc_LogOp : Cpc_UnaryOp<"log", Cpc_FloatTensor, [Cpc_AutocastFullPrecision, Cpc_ShardingRuleOpInterface, DeclareOpInterfaceMethods<Cpc_VJPOpInterface>]> { let summary = "ln x"; }
def Cpc_SqrtOp : Cpc_UnaryOp<"sqrt", Cpc_FloatTensor, [Cpc_ShardingRuleOpInterface, DeclareOpInterfaceMethods<Cpc_VJPOpInterface>]> { let summary = "sqrt(x)"; }
def Cpc_RsqrtOp : Cpc_UnaryOp<"rsqrt", Cpc_FloatTensor, [Cpc_AutocastFullPrecision, Cpc_ShardingRuleOpInterface, DeclareOpInterfaceMethods<Cpc_VJPOpInterface>]> { let summary = "1/sqrt(x)"; }
def Cpc_ReciprocalOp : Cpc_UnaryOp<"reciprocal", Cpc_FloatTensor, [Cpc_AutocastFullPrecision, Cpc_ShardingRuleOpInterface, DeclareOpInterfaceMethods<Cpc_VJPOpInterface>]> { let summary = "1/x"; }
def Cpc_ErfOp : Cpc_UnaryOp<"erf", Cpc_FloatTensor, [Cpc_ShardingRuleOpInterface, DeclareOpInterfaceMethods<Cpc_VJPOpInterface>]> { let summary = "Gauss error function"; }
def Cpc_TanhOp : Cpc_UnaryOp<"tanh", Cpc_FloatTensor, [Cpc_ShardingRuleOpInterface, DeclareOpInterfaceMethods<Cpc_VJPOpInterface>]> { let summary = "tanh(x)"; }
def Cpc_SinOp : Cpc_UnaryOp<"sin", Cpc_FloatTensor, [Cpc_AutocastFullPrecision, Cpc_ShardingRuleOpInterface, DeclareOpInterfaceMethods<Cpc_VJPOpInterface>]> { let summary = "sin(x)"; }
def Cpc_CosOp : Cpc_UnaryOp<"cos", Cpc_FloatTensor, [Cpc_AutocastFullPrecision, Cpc_ShardingRuleOpInterface, DeclareOpInterfaceMethods<Cpc_VJPOpInterface>]> { let summary = "cos(x)"; }
def Cpc_SigmoidOp : Cpc_UnaryOp<"sigmoid", Cpc_FloatTensor, [Cpc_ShardingRuleOpInterface, DeclareOpInterfaceMethods<Cpc_VJPOpInterface>]> { let summary = "1/(1+e^-x)"; }
def Cpc_ReluOp : Cpc_UnaryOp<"relu", Cpc_FloatTensor, [Cpc_ShardingRuleOpInterface, DeclareOpInterfaceMethods<Cpc_VJPOpInterface>]> { let summary = "max(x, 0)"; }
def Cpc_NotOp : Cpc_UnaryOp<"not", Cpc_BoolTensor, [Cpc_ShardingRuleOpInterface]> { let summary = "logical not"; }

def Cpc_GeluOp : Cpc_Op<"gelu", [Cpc_ShardingRuleOpInterface, DeclareOpInterfaceMethods<Cpc_VJPOpInterface>, Pure, Elementwise, SameOperandsAndResultType]> {
  let summary = "GELU: exact (erf) or its tanh approximation";
  let arguments = (ins Cpc_FloatTensor:$input, DefaultValuedAttr<Cpc_GeluApproximationAttr, "::cpc::GeluApproximation::None">:$approximate);
  let results = (outs Cpc_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

def Cpc_StopGradientOp : Cpc_UnaryOp<"stop_gradient", Cpc_Tensor, [DeclareOpInterfaceMethods<Cpc_ShardingRuleOpInterface, ["propagatesPartial"]>, DeclareOpInterfaceMethods<Cpc_VJPOpInterface, ["buildVJP", "hasDerivative"]>]> {
  let summary = "Identity whose result autodiff treats as a constant";
  let description = [{
    For values whose gradient cancels mathematically, e.g. the max that log-softmax subtracts
    for stability: without it, the backward pass would compute (and, split over ranks,
    all-reduce) terms that sum to zero.
  }];
}

def Cpc_CastOp : Cpc_Op<"cast", [DeclareOpInterfaceMethods<Cpc_ShardingRuleOpInterface, ["propagatesPartial"]>, DeclareOpInterfaceMethods<Cpc_VJPOpInterface>, Pure, Elementwise, SameOperandsAndResultShape]> {
  let summary = "Element type conversion (round to nearest even, float to int truncates)";
  let arguments = (ins Cpc_Tensor:$input);
  let results = (outs Cpc_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
}

// Binary ops broadcast their operands numpy-style; the result shape is inferred.
// `boolResult` marks predicates (comparisons, logic), whose result element type is i1.
class Cpc_BinaryOp<string mnemonic, Type type, bit boolResult = 0, list<Trait> traits = []>
    : Cpc_Op<mnemonic, !listconcat([Pure, InferTypeOpAdaptor], traits)> {
  let arguments = (ins type:$lhs, type:$rhs);
  let results = (outs Cpc_Tensor:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` functional-type(operands, results)";
  let extraClassDefinition = [{
    ::mlir::LogicalResult $cppClass::inferReturnTypes(::mlir::MLIRContext *context,
        std::optional<::mlir::Location> location, Adaptor adaptor,
        ::llvm::SmallVectorImpl<::mlir::Type> &inferred) {
      return ::cpc::inferBroadcastResult(location, adaptor.getLhs().getType(),
          adaptor.getRhs().getType(), }] # !if(boolResult, "true", "false") # [{,
          inferred);
    }
  }];
}

def Cpc_AddOp : Cpc_BinaryOp<"add", Cpc_Tensor, 0, [DeclareOpInterfaceMethods<Cpc_ShardingRuleOpInterface, ["propagatesPartial", "partialOperandsMustAgree"]>, Commutative, DeclareOpInterfaceMethods<Cpc_VJPOpInterface>]> {
  let summary = "a + b";
  let hasCanonicalizer = 1; // sums of disjoint scalar gathers' gradients -> concat (Canonicalization.cpp)
}
def Cpc_SubOp : Cpc_BinaryOp<"sub", Cpc_Tensor, 0, [DeclareOpInterfaceMethods<Cpc_ShardingRuleOpInterface, ["propagatesPartial", "partialOperandsMustAgree"]>, DeclareOpInterfaceMethods<Cpc_VJPOpInterface>]> {
  let summary = "a - b";
  let hasFolder = 1; // of two f32/f64 scalar constants (the VJP of x ^ c writes c - 1)
}
def Cpc_MulOp : Cpc_BinaryOp<"mul", Cpc_Tensor, 0, [DeclareOpInterfaceMethods<Cpc_ShardingRuleOpInterface, ["propagatesPartial"]>, Commutative, DeclareOpInterfaceMethods<Cpc_VJPOpInterface>]> { let summary = "a * b"; }
def Cpc_DivOp : Cpc_BinaryOp<"div", Cpc_Tensor, 0, [DeclareOpInterfaceMethods<Cpc_ShardingRuleOpInterface, ["propagatesPartial"]>, DeclareOpInterfaceMethods<Cpc_VJPOpInterface>]> {
  let summary = "a / b (integers truncate toward zero)";
}
def Cpc_PowOp : Cpc_BinaryOp<"pow", Cpc_FloatTensor, 0, [Cpc_AutocastFullPrecision, Cpc_ShardingRuleOpInterface, DeclareOpInterfaceMethods<Cpc_VJPOpInterface>]> {
  let summary = "a ^ b";
  let hasFolder = 1; // a ^ 1 is a (the VJP of a square writes one)
}
def Cpc_MaxOp : Cpc_BinaryOp<"max", Cpc_Tensor, 0, [Cpc_ShardingRuleOpInterface, Commutative, DeclareOpInterfaceMethods<Cpc_VJPOpInterface>]> { let summary = "max(a, b)"; }
def Cpc_MinOp : Cpc_BinaryOp<"min", Cpc_Tensor, 0, [Cpc_ShardingRuleOpInterface, Commutative, DeclareOpInterfaceMethods<Cpc_VJPOpInterface>]> { let summary = "min(a, b)"; }
def Cpc_EqualOp : Cpc_BinaryOp<"equal", Cpc_Tensor, 1, [Cpc_ShardingRuleOpInterface, Commutative]> { let summary = "a == b"; }
def Cpc_LessOp : Cpc_BinaryOp<"less", Cpc_Tensor, 1, [Cpc_ShardingRuleOpInterface]> { let summary = "a < b"; }
def Cpc_LessEqualOp : Cpc_BinaryOp<"less_equal", Cpc_Tensor, 1, [Cpc_ShardingRuleOpInterface]> { let summary = "a <= b"; }
def Cpc_GreaterOp : Cpc_BinaryOp<"greater", Cpc_Tensor, 1, [Cpc_ShardingRuleOpInterface]> { let summary = "a > b"; }
def Cpc_GreaterEqualOp : Cpc_BinaryOp<"greater_equal", Cpc_Tensor, 1, [Cpc_ShardingRuleOpInterface]> { let summary = "a >= b"; }
def Cpc_AndOp : Cpc_BinaryOp<"and", Cpc_BoolTensor, 1, [Cpc_ShardingRuleOpInterface, Commutative]> { let summary = "a && b"; }
def Cpc_OrOp : Cpc_BinaryOp<"or", Cpc_BoolTensor, 1, [Cpc_ShardingRuleOpInterface, Commutative]> { let summary = "a || b"; }

def Cpc_WhereOp : Cpc_Op<"where", [Cpc_ShardingRuleOpInterface, DeclareOpInterfaceMethods<Cpc_VJPOpInterface>, Pure, InferTypeOpAdaptor]> {
  let summary = "cond ? a : b, broadcasting all three";
  let arguments = (ins Cpc_BoolTensor:$condition, Cpc_Tensor:$on_true, Cpc_Tensor:$on_false);
  let results = (outs Cpc_Tensor:$result);
  let assemblyFormat = [{
    $condition `,` $on_true `,` $on_false attr-dict `:` functional-type(operands, results)
  }];
}

//===----------------------------------------------------------------------===//
// Contractions, reductions and normalizations.
//===----------------------------------------------------------------------===//

def Cpc_MatMulOp : Cpc_Op<"matmul", [Cpc_AutocastLowPrecision, DeclareOpInterfaceMethods<Cpc_ShardingRuleOpInterface, ["getShardingRule", "propagatesPartial"]>, DeclareOpInterfaceMethods<Cpc_VJPOpInterface>, Pure, InferTypeOpAdaptor]> {
  let summary = "numpy matmul: batched, with broadcast batch dims, optionally transposed operands";
  let description = [{
    Rank-1 operands are promoted (lhs gets a leading, rhs a trailing 1) and the promoted
    dim is dropped from the result, as in numpy. Batch dims broadcast. `transpose_lhs` /
    `transpose_rhs` swap the last two dims of an operand (rank >= 2) before multiplying, so
    that x @ W^T needs no transposed copy of W (GEMM reads it transposed).
  }];
  let arguments = (ins Cpc_FloatTensor:$lhs, Cpc_FloatTensor:$rhs,
                       DefaultValuedAttr<BoolAttr, "false">:$transpose_lhs,
                       DefaultValuedAttr<BoolAttr, "false">:$transpose_rhs);
  let results = (outs Cpc_FloatTensor:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` functional-type(operands, results)";
  let hasCanonicalizer = 1;
}

def Cpc_MatMulBiasOp : Cpc_Op<"matmul_bias", [Pure]> {
  let summary = "matmul + bias (+ GELU): a Linear layer as one kernel, the bias in the GEMM's epilogue";
  let description = [{
    Written by cpc-fuse-epilogues, after partitioning, where a matmul's only use adds a bias
    along its last dim (and the sum feeds a GELU): `result` = act(lhs @ rhs + bias), where
    `bias` has one element per column of the result and `activation` is "none" or "gelu"
    (`approximate` as cpc.gelu's). With "gelu", the optional second result `preactivation` is
    lhs @ rhs + bias, for the uses that need it (gelu_grad). Each stage rounds to the result's
    type as the separate ops would, so the values are theirs bit for bit on the CPU; a GPU adds
    the bias in f32 before rounding (cuBLASLt's epilogue).
  }];
  let arguments = (ins Cpc_FloatTensor:$lhs, Cpc_FloatTensor:$rhs, Cpc_FloatTensor:$bias,
                       DefaultValuedAttr<BoolAttr, "false">:$transpose_lhs,
                       DefaultValuedAttr<BoolAttr, "false">:$transpose_rhs,
                       DefaultValuedAttr<Cpc_FusedActivationAttr, "::cpc::FusedActivation::None">:$activation,
                       DefaultValuedAttr<Cpc_GeluApproximationAttr, "::cpc::GeluApproximation::None">:$approximate);
  let results = (outs Cpc_FloatTensor:$result, Variadic<Cpc_FloatTensor>:$preactivation);
  let assemblyFormat = "$lhs `,` $rhs `,` $bias attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Cpc_AddLayerNormOp : Cpc_Op<"add_layer_norm", [Pure]> {
  let summary = "sum = lhs + rhs and layer_norm(sum): a residual add and the LayerNorm after it";
  let description = [{
    Written by cpc-fuse-residual-norm, after partitioning, where a transformer block adds its
    residual and normalizes the sum: one pass over the rows instead of two (the sum is written
    and normalized while the row is in cache). `sum` is the residual stream the model carries on
    (and what layer_norm_grad reads); each result is rounded as the separate cpc.add and
    cpc.layer_norm round it. f32 and f64 only: 16-bit kernels compute in f32, where the separate
    LayerNorm would read the 16-bit sum.
  }];
  let arguments = (ins Cpc_FloatTensor:$lhs, Cpc_FloatTensor:$rhs, Cpc_FloatTensor:$scale, Cpc_FloatTensor:$bias,
                       I64Attr:$axis, F64Attr:$epsilon);
  let results = (outs Cpc_FloatTensor:$sum, Cpc_FloatTensor:$result);
  let assemblyFormat = [{
    $lhs `,` $rhs `,` $scale `,` $bias attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Cpc_LayerNormGradAddOp : Cpc_Op<"layer_norm_grad_add", [Pure]> {
  let summary = "cpc.layer_norm_grad with `addend` added to the input gradient";
  let description = [{
    Written by cpc-fuse-residual-norm where the backward adds the residual stream's gradient to
    a LayerNorm's input gradient: (d input + addend, d scale, d bias), the sum written once
    instead of the input gradient written, read and written again. Rounded as layer_norm_grad
    then cpc.add; f32 and f64 only.
  }];
  let arguments = (ins Cpc_FloatTensor:$input, Cpc_FloatTensor:$scale, Cpc_FloatTensor:$grad,
                       Cpc_FloatTensor:$addend, I64Attr:$axis, F64Attr:$epsilon);
  let results = (outs Cpc_FloatTensor:$input_grad, Cpc_FloatTensor:$scale_grad, Cpc_FloatTensor:$bias_grad);
  let assemblyFormat = [{
    $input `,` $scale `,` $grad `,` $addend attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Cpc_AttentionOp : Cpc_Op<"attention", [Cpc_AutocastLowPrecision, DeclareOpInterfaceMethods<Cpc_ShardingRuleOpInterface, ["getShardingRule", "propagatesPartial"]>, DeclareOpInterfaceMethods<Cpc_VJPOpInterface>, Pure]> {
  let summary = "softmax(scale * q k^T) v: scaled dot-product attention as one kernel";
  let description = [{
    Written by cpc-fuse-attention where a graph computes matmul(q, k^T) (times a scalar),
    softmax over the keys and matmul by v: `q` [..., N, D], `k` [..., M, D], `v` [..., M, Dv]
    with equal batch dims give `result` [..., N, Dv] and `probabilities` [..., N, M], the
    softmax that cpc.attention_grad reads. The kernels write the N x M scores once (the
    separate ops write them three times: product, scaled, softmax). 16-bit operands are
    computed in f32.

    `layout` "bnhd" takes the operands token-major, as a Linear writes them before the heads
    are split: q [..., N, H, D], k [..., M, H, D], v [..., M, H, Dv], result [..., N, H, Dv]
    (probabilities stay [..., H, N, M]). cpc-fuse-attention picks it when the graph transposes
    q, k and v to [..., H, N, D] and the result back: the kernels read each head's rows in place,
    so neither transpose is materialised (nor its gradient).
  }];
  let arguments = (ins Cpc_FloatTensor:$q, Cpc_FloatTensor:$k, Cpc_FloatTensor:$v, F64Attr:$scale,
                       DefaultValuedAttr<Cpc_AttentionLayoutAttr, "::cpc::AttentionLayout::HeadMajor">:$layout);
  let results = (outs Cpc_FloatTensor:$result, Cpc_FloatTensor:$probabilities);
  let assemblyFormat = "$q `,` $k `,` $v attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// Whether q, k and v are [..., N, H, D] (layout "bnhd") rather than [..., H, N, D].
    bool isTokenMajor() { return getLayout() == ::cpc::AttentionLayout::TokenMajor; }
  }];
}

def Cpc_AttentionGradOp : Cpc_Op<"attention_grad", [DeclareOpInterfaceMethods<Cpc_ShardingRuleOpInterface, ["getShardingRule", "propagatesPartial"]>, Pure]> {
  let summary = "VJP of cpc.attention: the gradients of q, k and v from the result's";
  let description = [{
    With P = `probabilities`: dv = P^T grad, dP = grad v^T, dS = scale * P * (dP - rowsum(P *
    dP)) (softmax's VJP, then the scale's), dq = dS k and dk = dS^T q; dP and dS live one block
    of rows at a time. `layout` is the forward op's.
  }];
  let arguments = (ins Cpc_FloatTensor:$q, Cpc_FloatTensor:$k, Cpc_FloatTensor:$v,
                       Cpc_FloatTensor:$probabilities, Cpc_FloatTensor:$grad, F64Attr:$scale,
                       DefaultValuedAttr<Cpc_AttentionLayoutAttr, "::cpc::AttentionLayout::HeadMajor">:$layout);
  let results = (outs Cpc_FloatTensor:$q_grad, Cpc_FloatTensor:$k_grad, Cpc_FloatTensor:$v_grad);
  let assemblyFormat = [{
    $q `,` $k `,` $v `,` $probabilities `,` $grad attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// Whether q, k and v are [..., N, H, D] (layout "bnhd"), as in the forward op.
    bool isTokenMajor() { return getLayout() == ::cpc::AttentionLayout::TokenMajor; }
  }];
}

class Cpc_ReduceOp<string mnemonic, Type type, list<Trait> traits = [], list<string> shardingMethods = []>
    : Cpc_Op<mnemonic, !listconcat(traits, [Pure, InferTypeOpAdaptor, DeclareOpInterfaceMethods<Cpc_VJPOpInterface>,
                        DeclareOpInterfaceMethods<Cpc_ShardingRuleOpInterface,
                                                  !listconcat(["getShardingRule", "propagatesPartial"], shardingMethods)>])> {
  let arguments = (ins type:$input, DenseI64ArrayAttr:$axes,
                       DefaultValuedAttr<BoolAttr, "false">:$keepdims);
  let results = (outs type:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let extraClassDefinition = [{
    ::mlir::LogicalResult $cppClass::inferReturnTypes(::mlir::MLIRContext *context,
        std::optional<::mlir::Location> location, Adaptor adaptor,
        ::llvm::SmallVectorImpl<::mlir::Type> &inferred) {
      return ::cpc::inferReduceResult(location, adaptor.getInput().getType(),
          adaptor.getAxes(), adaptor.getKeepdims(), inferred);
    }
  }];
}

def Cpc_ReduceSumOp : Cpc_ReduceOp<"reduce_sum", Cpc_Tensor, [Cpc_AutocastFullPrecision]> {
  let summary = "sum over axes";
  let hasCanonicalizer = 1;
}

def Cpc_ReduceSumSquaresOp : Cpc_Op<"reduce_sum_squares", [Pure, InferTypeOpAdaptor,
    DeclareOpInterfaceMethods<Cpc_ShardingRuleOpInterface, ["getShardingRule", "propagatesPartial"]>]> {
  let summary = "sum of the squares over axes: reduce_sum(x * x) in one pass";
  let description = [{
    Written by cpc-fuse-optimizer where a reduce_sum's input is x * x read by nothing else (the
    global gradient norm's terms): each square is rounded to x's type as cpc.mul rounds it, then
    summed as cpc.reduce_sum sums, so for f32 and f64 the result is theirs bit for bit on the
    CPU, without writing the squares (16-bit inputs keep their squares in f32).
  }];
  let arguments = (ins Cpc_FloatTensor:$input, DenseI64ArrayAttr:$axes,
                       DefaultValuedAttr<BoolAttr, "false">:$keepdims);
  let results = (outs Cpc_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let extraClassDefinition = [{
    ::mlir::LogicalResult $cppClass::inferReturnTypes(::mlir::MLIRContext *context,
        std::optional<::mlir::Location> location, Adaptor adaptor,
        ::llvm::SmallVectorImpl<::mlir::Type> &inferred) {
      return ::cpc::inferReduceResult(location, adaptor.getInput().getType(),
          adaptor.getAxes(), adaptor.getKeepdims(), inferred);
    }
  }];
}
def Cpc_ReduceMeanOp : Cpc_ReduceOp<"reduce_mean", Cpc_FloatTensor, [Cpc_AutocastFullPrecision], ["partialResultScale"]> {
  let summary = "mean over axes";
}
def Cpc_ReduceMaxOp : Cpc_ReduceOp<"reduce_max", Cpc_Tensor> { let summary = "max over axes"; }
def Cpc_ReduceMinOp : Cpc_ReduceOp<"reduce_min", Cpc_Tensor> { let summary = "min over axes"; }
def Cpc_ReduceProdOp : Cpc_ReduceOp<"reduce_prod", Cpc_Tensor, [Cpc_AutocastFullPrecision]> { let summary = "product over axes"; }

def Cpc_LayerNormOp : Cpc_Op<"layer_norm", [Cpc_AutocastFullPrecision, DeclareOpInterfaceMethods<Cpc_ShardingRuleOpInterface, ["getShardingRule", "propagatesPartial"]>, DeclareOpInterfaceMethods<Cpc_VJPOpInterface>, Pure, InferTypeOpAdaptor]> {
  let summary = "(x - mean) / sqrt(var + epsilon) * scale + bias over dims [axis, rank)";
  let arguments = (ins Cpc_FloatTensor:$input, Cpc_FloatTensor:$scale, Cpc_FloatTensor:$bias,
                       I64Attr:$axis, F64Attr:$epsilon);
  let results = (outs Cpc_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $scale `,` $bias attr-dict `:` functional-type(operands, results)
  }];
}

def Cpc_SoftmaxOp : Cpc_Op<"softmax", [Cpc_AutocastFullPrecision, DeclareOpInterfaceMethods<Cpc_ShardingRuleOpInterface, ["getShardingRule", "propagatesPartial"]>, DeclareOpInterfaceMethods<Cpc_VJPOpInterface>, Pure, SameOperandsAndResultType]> {
  let summary = "exp(x) / sum(exp(x)) along axis";
  let arguments = (ins Cpc_FloatTensor:$input, I64Attr:$axis);
  let results = (outs Cpc_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasVerifier = 1;
}

def Cpc_Conv2DOp : Cpc_Op<"conv2d", [Cpc_AutocastLowPrecision, DeclareOpInterfaceMethods<Cpc_ShardingRuleOpInterface, ["getShardingRule", "propagatesPartial"]>, DeclareOpInterfaceMethods<Cpc_VJPOpInterface>, Pure, InferTypeOpAdaptor]> {
  let summary = "2-D convolution, NCHW input, OIHW weight, optional bias [O]";
  let arguments = (ins Cpc_FloatTensor:$input, Cpc_FloatTensor:$weight,
                       Optional<Cpc_FloatTensor>:$bias,
                       DenseI64ArrayAttr:$strides,   // [sh, sw]
                       DenseI64ArrayAttr:$padding,   // [top, left, bottom, right]
                       DenseI64ArrayAttr:$dilations, // [dh, dw]
                       DefaultValuedAttr<I64Attr, "1">:$groups);
  let results = (outs Cpc_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $weight (`,` $bias^)? attr-dict `:` functional-type(operands, results)
  }];
}

//===----------------------------------------------------------------------===//
// Data movement.
//===----------------------------------------------------------------------===//

def Cpc_ReshapeOp : Cpc_Op<"reshape", [DeclareOpInterfaceMethods<Cpc_ShardingRuleOpInterface, ["getShardingRule", "propagatesPartial"]>, DeclareOpInterfaceMethods<Cpc_VJPOpInterface>, Pure]> {
  let summary = "Same elements, row-major, new static shape";
  let arguments = (ins Cpc_Tensor:$input);
  let results = (outs Cpc_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Cpc_TransposeOp : Cpc_Op<"transpose", [DeclareOpInterfaceMethods<Cpc_ShardingRuleOpInterface, ["getShardingRule", "propagatesPartial"]>, DeclareOpInterfaceMethods<Cpc_VJPOpInterface>, Pure, InferTypeOpAdaptor]> {
  let summary = "Permute dims: result dim i is input dim permutation[i]";
  let arguments = (ins Cpc_Tensor:$input, DenseI64ArrayAttr:$permutation);
  let results = (outs Cpc_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
}

def Cpc_SliceOp : Cpc_Op<"slice", [DeclareOpInterfaceMethods<Cpc_ShardingRuleOpInterface, ["getShardingRule", "propagatesPartial", "adaptToBlocks"]>, DeclareOpInterfaceMethods<Cpc_VJPOpInterface>, Pure, InferTypeOpAdaptor]> {
  let summary = "Strided slice: per dim, elements start, start+stride, ... < limit";
  let arguments = (ins Cpc_Tensor:$input, DenseI64ArrayAttr:$starts, DenseI64ArrayAttr:$limits,
                       DenseI64ArrayAttr:$strides);
  let results = (outs Cpc_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
}

def Cpc_ConcatOp : Cpc_Op<"concat", [DeclareOpInterfaceMethods<Cpc_ShardingRuleOpInterface, ["getShardingRule", "propagatesPartial"]>, DeclareOpInterfaceMethods<Cpc_VJPOpInterface>, Pure, InferTypeOpAdaptor]> {
  let summary = "Join tensors along axis";
  let arguments = (ins Variadic<Cpc_Tensor>:$inputs, I64Attr:$axis);
  let results = (outs Cpc_Tensor:$result);
  let assemblyFormat = "$inputs attr-dict `:` functional-type(operands, results)";
}

def Cpc_BroadcastOp : Cpc_Op<"broadcast", [DeclareOpInterfaceMethods<Cpc_ShardingRuleOpInterface, ["propagatesPartial"]>, DeclareOpInterfaceMethods<Cpc_VJPOpInterface>, Pure]> {
  let summary = "numpy broadcast to the result shape (ONNX Expand)";
  let arguments = (ins Cpc_Tensor:$input);
  let results = (outs Cpc_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Cpc_GatherOp : Cpc_Op<"gather", [DeclareOpInterfaceMethods<Cpc_ShardingRuleOpInterface, ["getShardingRule", "propagatesPartial", "adaptToBlocks"]>, DeclareOpInterfaceMethods<Cpc_VJPOpInterface>, Pure, InferTypeOpAdaptor]> {
  let summary = "ONNX Gather: take slices of data along axis at indices";
  let description = [{
    Result shape is data.shape[:axis] + indices.shape + data.shape[axis+1:]. Negative
    indices count from the end of the axis. With `block_axes`, data holds this rank's block of
    the axis over those mesh axes and the indices are global: slices outside the block are zero
    (the ranks' results are a partial sum: vocab-parallel embeddings).
  }];
  let arguments = (ins Cpc_Tensor:$data, Cpc_IndexTensor:$indices, I64Attr:$axis,
                       OptionalAttr<StrArrayAttr>:$block_axes);
  let results = (outs Cpc_Tensor:$result);
  let assemblyFormat = "$data `,` $indices attr-dict `:` functional-type(operands, results)";
}

def Cpc_GatherElementsOp : Cpc_Op<"gather_elements", [DeclareOpInterfaceMethods<Cpc_ShardingRuleOpInterface, ["getShardingRule", "propagatesPartial", "adaptToBlocks"]>, DeclareOpInterfaceMethods<Cpc_VJPOpInterface>, Pure, InferTypeOpAdaptor]> {
  let summary = "ONNX GatherElements / torch.gather: result has the shape of indices";
  let description = [{
    With `block_axes`, data holds this rank's block of the axis over those mesh axes and the
    indices are global: elements outside the block are zero (a partial sum over the ranks:
    the target logit of a vocab-parallel cross-entropy).
  }];
  let arguments = (ins Cpc_Tensor:$data, Cpc_IndexTensor:$indices, I64Attr:$axis,
                       OptionalAttr<StrArrayAttr>:$block_axes);
  let results = (outs Cpc_Tensor:$result);
  let assemblyFormat = "$data `,` $indices attr-dict `:` functional-type(operands, results)";
}

def Cpc_ScatterNDOp : Cpc_Op<"scatter_nd", [DeclareOpInterfaceMethods<Cpc_VJPOpInterface>, Pure, InferTypeOpAdaptor]> {
  let summary = "ONNX ScatterND: copy of data with slices at indices replaced by updates";
  let arguments = (ins Cpc_Tensor:$data, Cpc_IndexTensor:$indices, Cpc_Tensor:$updates,
                       DefaultValuedAttr<Cpc_ScatterReductionAttr, "::cpc::ScatterReduction::None">:$reduction);
  let results = (outs Cpc_Tensor:$result);
  let assemblyFormat = [{
    $data `,` $indices `,` $updates attr-dict `:` functional-type(operands, results)
  }];
}

def Cpc_TopKOp : Cpc_Op<"topk", [DeclareOpInterfaceMethods<Cpc_ShardingRuleOpInterface, ["getShardingRule", "propagatesPartial"]>, DeclareOpInterfaceMethods<Cpc_VJPOpInterface>, Pure, InferTypeOpAdaptor]> {
  let summary = "The k largest (or smallest) elements along axis and their indices";
  let description = [{
    Ties keep the lower index first, as ONNX specifies. With `sorted`, results are ordered.
  }];
  let arguments = (ins Cpc_Tensor:$input, I64Attr:$k, I64Attr:$axis,
                       DefaultValuedAttr<BoolAttr, "true">:$largest,
                       DefaultValuedAttr<BoolAttr, "true">:$sorted);
  let results = (outs Cpc_Tensor:$values, StaticShapeTensorOf<[I64]>:$indices);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($values) `,` type($indices)";
}

def Cpc_ArgSortOp : Cpc_Op<"argsort", [DeclareOpInterfaceMethods<Cpc_ShardingRuleOpInterface, ["getShardingRule", "propagatesPartial"]>, Pure, InferTypeOpAdaptor]> {
  let summary = "Indices that sort input along axis (stable: ties keep input order)";
  let arguments = (ins Cpc_Tensor:$input, I64Attr:$axis,
                       DefaultValuedAttr<BoolAttr, "false">:$descending);
  let results = (outs StaticShapeTensorOf<[I64]>:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
}

def Cpc_PadOp : Cpc_Op<"pad", [DeclareOpInterfaceMethods<Cpc_ShardingRuleOpInterface, ["getShardingRule", "propagatesPartial"]>, DeclareOpInterfaceMethods<Cpc_VJPOpInterface>, Pure, InferTypeOpAdaptor]> {
  let summary = "Pad with a constant: `low_padding`/`high_padding` elements at each end, `interior_padding` between elements";
  let description = [{
    Result dim = low + high + n + (n - 1) * interior. The VJP of a strided slice is a pad of the
    gradient with zeros.
  }];
  let arguments = (ins Cpc_Tensor:$input, DenseI64ArrayAttr:$low_padding, DenseI64ArrayAttr:$high_padding,
                       DenseI64ArrayAttr:$interior_padding, DefaultValuedAttr<F64Attr, "0.0">:$value);
  let results = (outs Cpc_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
}

//===----------------------------------------------------------------------===//
// Gradients: fused VJPs of ops whose backward is not a short chain of other ops.
//===----------------------------------------------------------------------===//

def Cpc_GeluGradOp : Cpc_Op<"gelu_grad", [Cpc_ShardingRuleOpInterface, Pure, SameOperandsAndResultType]> {
  let summary = "grad * gelu'(input)";
  let arguments = (ins Cpc_FloatTensor:$input, Cpc_FloatTensor:$grad,
                       DefaultValuedAttr<Cpc_GeluApproximationAttr, "::cpc::GeluApproximation::None">:$approximate);
  let results = (outs Cpc_FloatTensor:$result);
  let assemblyFormat = "$input `,` $grad attr-dict `:` type($input)";
}

def Cpc_SoftmaxGradOp : Cpc_Op<"softmax_grad", [DeclareOpInterfaceMethods<Cpc_ShardingRuleOpInterface, ["getShardingRule", "propagatesPartial"]>, Pure, SameOperandsAndResultType]> {
  let summary = "output * (grad - sum(grad * output, axis)): the VJP of softmax from its output";
  let arguments = (ins Cpc_FloatTensor:$output, Cpc_FloatTensor:$grad, I64Attr:$axis);
  let results = (outs Cpc_FloatTensor:$result);
  let assemblyFormat = "$output `,` $grad attr-dict `:` type($output)";
}

def Cpc_LayerNormGradOp : Cpc_Op<"layer_norm_grad", [DeclareOpInterfaceMethods<Cpc_ShardingRuleOpInterface, ["getShardingRule", "propagatesPartial"]>, Pure, InferTypeOpAdaptor]> {
  let summary = "VJP of layer_norm: gradients of input, scale and bias";
  let description = [{
    Recomputes the mean and inverse standard deviation from `input` (cheaper to store than
    to save), then returns (d input, d scale, d bias).
  }];
  let arguments = (ins Cpc_FloatTensor:$input, Cpc_FloatTensor:$scale, Cpc_FloatTensor:$grad,
                       I64Attr:$axis, F64Attr:$epsilon);
  let results = (outs Cpc_FloatTensor:$input_grad, Cpc_FloatTensor:$scale_grad,
                      Cpc_FloatTensor:$bias_grad);
  let assemblyFormat = [{
    $input `,` $scale `,` $grad attr-dict `:` functional-type(operands, results)
  }];
}

def Cpc_GatherGradOp : Cpc_Op<"gather_grad", [DeclareOpInterfaceMethods<Cpc_ShardingRuleOpInterface, ["getShardingRule", "propagatesPartial", "adaptToBlocks"]>, Pure, InferTypeOpAdaptor]> {
  let summary = "VJP of gather: scatter-add grad into zeros of the data's shape";
  let description = [{
    With `block_axes`, the result is this rank's block of the axis (`dim_size` long) over those
    mesh axes and the indices are global: only those inside the block are added.
  }];
  let arguments = (ins Cpc_FloatTensor:$grad, Cpc_IndexTensor:$indices, I64Attr:$axis,
                       I64Attr:$dim_size, OptionalAttr<StrArrayAttr>:$block_axes);
  let results = (outs Cpc_FloatTensor:$result);
  let assemblyFormat = "$grad `,` $indices attr-dict `:` functional-type(operands, results)";
}

def Cpc_GatherElementsGradOp : Cpc_Op<"gather_elements_grad", [DeclareOpInterfaceMethods<Cpc_ShardingRuleOpInterface, ["getShardingRule", "propagatesPartial", "adaptToBlocks"]>, Pure]> {
  let summary = "VJP of gather_elements: scatter-add grad (indices' shape) into zeros (result shape)";
  let description = [{
    With `block_axes`, the result is this rank's block of the axis over those mesh axes and
    the indices are global: only those inside the block are added.
  }];
  let arguments = (ins Cpc_FloatTensor:$grad, Cpc_IndexTensor:$indices, I64Attr:$axis,
                       OptionalAttr<StrArrayAttr>:$block_axes);
  let results = (outs Cpc_FloatTensor:$result);
  let assemblyFormat = "$grad `,` $indices attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Cpc_Conv2DGradInputOp : Cpc_Op<"conv2d_grad_input", [DeclareOpInterfaceMethods<Cpc_ShardingRuleOpInterface, ["getShardingRule", "propagatesPartial"]>, Pure]> {
  let summary = "VJP of conv2d with respect to its input (a transposed convolution)";
  let arguments = (ins Cpc_FloatTensor:$grad, Cpc_FloatTensor:$weight, DenseI64ArrayAttr:$strides,
                       DenseI64ArrayAttr:$padding, DenseI64ArrayAttr:$dilations,
                       DefaultValuedAttr<I64Attr, "1">:$groups);
  let results = (outs Cpc_FloatTensor:$result);
  let assemblyFormat = "$grad `,` $weight attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Cpc_Conv2DGradWeightOp : Cpc_Op<"conv2d_grad_weight", [DeclareOpInterfaceMethods<Cpc_ShardingRuleOpInterface, ["getShardingRule", "propagatesPartial"]>, Pure]> {
  let summary = "VJP of conv2d with respect to its weight";
  let arguments = (ins Cpc_FloatTensor:$input, Cpc_FloatTensor:$grad, DenseI64ArrayAttr:$strides,
                       DenseI64ArrayAttr:$padding, DenseI64ArrayAttr:$dilations,
                       DefaultValuedAttr<I64Attr, "1">:$groups);
  let results = (outs Cpc_FloatTensor:$result);
  let assemblyFormat = "$input `,` $grad attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Training state: persistent variables and the optimizer.
//===----------------------------------------------------------------------===//

def Cpc_StateOp : Cpc_VariableReadOp<"state"> {
  let summary = "Reads a persistent training variable (optimizer moments, gradient accumulators, loss scale)";
  let description = [{
    The variable (a cpc.variable with a `role`) says what it holds; passes, the plan and the
    runtime read the role (the name only identifies the variable). Example:
    `%m = cpc.state @"adamw.exp_avg.w" : tensor<4xf32>`
  }];
  let extraClassDeclaration = variableAccessors # [{
    StateRole getRole();
  }];
}

def Cpc_AssignOp : Cpc_Op<"assign", [DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "Writes a new value into a parameter or state variable";
  let description = [{
    The write happens where the op stands; reads after it in the same function see the new
    value. Training steps end with assigns of the updated parameters and optimizer states.
    Example: `cpc.assign %new to @w : tensor<4x8xf32>`
  }];
  let arguments = (ins Cpc_Tensor:$value, FlatSymbolRefAttr:$name);
  let assemblyFormat = "$value `to` $name attr-dict `:` type($value)";
}

def Cpc_CopyOp : Cpc_Op<"copy", [Pure, SameOperandsAndResultType]> {
  let summary = "The value of its operand, in a buffer of its own";
  let description = [{
    The plan builder writes it before an assign overwrites a variable whose value the function
    also returns (the loss scale a step used), so that the result keeps the value it read.
    Passes do not create it. Example: `%kept = cpc.copy %scale : tensor<f32>`
  }];
  let arguments = (ins Cpc_Tensor:$input);
  let results = (outs Cpc_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

def Cpc_AdamWOp : Cpc_Op<"adamw", [Cpc_ShardingRuleOpInterface, Pure, InferTypeOpAdaptor]> {
  let summary = "One AdamW step: decoupled weight decay, bias-corrected moments";
  let description = [{
    With t = step (>= 1): m' = b1 m + (1-b1) g; v' = b2 v + (1-b2) g^2;
    p' = p - lr * (m'/(1-b1^t) / (sqrt(v'/(1-b2^t)) + eps) + weight_decay * p), as torch.optim.AdamW.
    `lr` and `step` are rank-0 f32 values computed by the runtime each step. The optional
    rank-0 `grad_scale` (the gradient's type) multiplies g first, rounded as cpc.mul would (in f32
    for 16-bit tensors, which update widened): cpc-fuse-optimizer moves the clip's scaling there,
    saving a pass over every gradient.
  }];
  let arguments = (ins Cpc_FloatTensor:$param, Cpc_FloatTensor:$grad, Cpc_FloatTensor:$exp_avg,
                       Cpc_FloatTensor:$exp_avg_sq, Cpc_FloatTensor:$lr, Cpc_FloatTensor:$step,
                       Optional<Cpc_FloatTensor>:$grad_scale,
                       F64Attr:$beta1, F64Attr:$beta2, F64Attr:$epsilon, F64Attr:$weight_decay);
  let results = (outs Cpc_FloatTensor:$new_param, Cpc_FloatTensor:$new_exp_avg,
                      Cpc_FloatTensor:$new_exp_avg_sq);
  let assemblyFormat = [{
    $param `,` $grad `,` $exp_avg `,` $exp_avg_sq `,` $lr `,` $step (`grad_scale` $grad_scale^)? attr-dict `:`
    functional-type(operands, results)
  }];
}

def Cpc_MultiTensorAdamWOp : Cpc_Op<"multi_tensor_adamw", [Pure]> {
  let summary = "cpc.adamw over many tensors in one kernel (torch's multi-tensor / foreach AdamW)";
  let description = [{
    Written by cpc-group-adamw, last: the AdamW updates of one step that share lr, step, grad
    scale and betas, as one op. `tensors` holds N params, then their N gradients, N exp_avg and
    N exp_avg_sq; the results are the N new params, N new exp_avg and N new exp_avg_sq; tensor i
    decays by `weight_decays[i]`. Each tensor's update is cpc.adamw's (with `grad_scale`), bit
    for bit; on a GPU one launch covers many tensors instead of one launch each.
  }];
  let arguments = (ins Cpc_FloatTensor:$lr, Cpc_FloatTensor:$step, Cpc_FloatTensor:$grad_scale,
                       Variadic<Cpc_FloatTensor>:$tensors,
                       F64Attr:$beta1, F64Attr:$beta2, F64Attr:$epsilon, DenseF64ArrayAttr:$weight_decays);
  let results = (outs Variadic<Cpc_FloatTensor>:$updated);
  let assemblyFormat = [{
    $lr `,` $step `,` $grad_scale `,` `[` $tensors `]` attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// Tensors updated (N).
    unsigned getNumUpdates() { return getTensors().size() / 4; }
    ::mlir::Value getParam(unsigned i) { return getTensors()[i]; }
    ::mlir::Value getGrad(unsigned i) { return getTensors()[getNumUpdates() + i]; }
    ::mlir::Value getExpAvg(unsigned i) { return getTensors()[2 * getNumUpdates() + i]; }
    ::mlir::Value getExpAvgSq(unsigned i) { return getTensors()[3 * getNumUpdates() + i]; }
    ::mlir::Value getNewParam(unsigned i) { return getUpdated()[i]; }
    ::mlir::Value getNewExpAvg(unsigned i) { return getUpdated()[getNumUpdates() + i]; }
    ::mlir::Value getNewExpAvgSq(unsigned i) { return getUpdated()[2 * getNumUpdates() + i]; }
  }];
}

//===----------------------------------------------------------------------===//
// Parallelism: the device mesh and sharding annotations.
//===----------------------------------------------------------------------===//

def Cpc_MeshOp : Cpc_Op<"mesh", [Symbol]> {
  let summary = "A named n-d grid of ranks, e.g. axes (dp, pp, tp)";
  let description = [{
    `roles`, when given, says per axis what it is for where a strategy needs to know: SUMMA
    (2D, 2.5D tensor parallelism) finds its row, column and depth axes by role, the 3D matmul
    its weight, input and output axes; `none` for the others. Names only label axes. Example:
    `cpc.mesh @mesh shape = [2, 2] axes = ["dp", "tp"]`,
    `cpc.mesh @mesh shape = [2, 2] axes = ["r", "c"] roles = [#cpc.axis_role<tensor_row>, #cpc.axis_role<tensor_col>]`
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, DenseI64ArrayAttr:$shape,
                       StrArrayAttr:$axis_names, OptionalAttr<Cpc_MeshAxisRolesAttr>:$axis_roles);
  let assemblyFormat = "$sym_name `shape` `=` $shape `axes` `=` $axis_names (`roles` `=` $axis_roles^)? attr-dict";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// Size of the axis named `name`, or -1 when the mesh has no such axis.
    int64_t getAxisSize(::llvm::StringRef name);
    int64_t getNumRanks();
    /// The role of axis `name` (none without roles or such an axis).
    MeshAxisRole getAxisRole(::llvm::StringRef name);
    /// The name of the axis with `role`, or "" when the mesh has none.
    ::llvm::StringRef getAxisWithRole(MeshAxisRole role);
  }];
}

def Cpc_ShardOp : Cpc_Op<"shard", [Cpc_ShardingRuleOpInterface, Pure, SameOperandsAndResultType,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "Annotates that a value has the given sharding";
  let arguments = (ins Cpc_Tensor:$input, Cpc_ShardingAttr:$sharding);
  let results = (outs Cpc_Tensor:$result);
  let assemblyFormat = "$input `to` $sharding attr-dict `:` type($input)";
}

def Cpc_AllReduceOp : Cpc_Op<"all_reduce", [Cpc_GroupCollective, Cpc_CombiningCollective, Cpc_RankDependent, Cpc_MayRunInPlace, InferTypeOpAdaptor,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "Combines values over mesh axes (sum by default, or max) on every rank of a group";
  let description = [{
    A collective: every rank of a group (the ranks that differ only in `mesh_axes`) must issue the
    same all_reduce in the same order. `kind` is the reduction: `sum` turns partial sums into
    full values; `max` gives every rank the element-wise maximum (e.g. the max of a softmax
    split over its reduced dim). Several operands form one bucket, reduced in one call.
    Not Pure, so that it is never reordered or dropped.
    Example: `cpc.all_reduce %m over @mesh ["tp"] {kind = #cpc.reduction<max>} : tensor<8xf32>`
  }];
  let arguments = (ins Variadic<Cpc_Tensor>:$inputs, FlatSymbolRefAttr:$mesh, StrArrayAttr:$mesh_axes,
                       DefaultValuedAttr<Cpc_ReductionKindAttr, "::cpc::ReductionKind::Sum">:$kind);
  let results = (outs Variadic<Cpc_Tensor>:$results);
  let assemblyFormat = "$inputs `over` $mesh $mesh_axes attr-dict `:` type($inputs)";
  let builders = [OpBuilder<(ins "::mlir::ValueRange":$inputs, "::mlir::FlatSymbolRefAttr":$mesh,
                                 "::mlir::ArrayAttr":$mesh_axes), [{
    build($_builder, $_state, inputs, mesh, mesh_axes,
          ReductionKindAttr::get($_builder.getContext(), ReductionKind::Sum));
  }]>];
}

def Cpc_AllGatherOp : Cpc_Op<"all_gather", [Cpc_GroupCollective, Cpc_RankDependent, DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "Concatenates every rank's block along `dim` (0 when unset), in rank order over the mesh axes";
  let description = [{
    The inverse of a shard_slice along `dim`: each rank contributes its block and all get the
    value whole along that dim (e.g. ZeRO's parameter shards after the optimizer step, or a
    batch-split value that an op needs whole). A collective.
  }];
  let arguments = (ins Cpc_Tensor:$input, FlatSymbolRefAttr:$mesh, StrArrayAttr:$mesh_axes,
                       OptionalAttr<I64Attr>:$dim);
  let results = (outs Cpc_Tensor:$result);
  let assemblyFormat = "$input `over` $mesh $mesh_axes attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
  let builders = [
    // Along dim 0 (the attribute left unset).
    OpBuilder<(ins "::mlir::Type":$result, "::mlir::Value":$input, "::mlir::FlatSymbolRefAttr":$mesh,
                   "::mlir::ArrayAttr":$mesh_axes), [{
      build($_builder, $_state, result, input, mesh, mesh_axes, ::mlir::IntegerAttr());
    }]>,
  ];
  let extraClassDeclaration = [{
    /// The dim the blocks are joined along (unset: 0, which plans then do not mention).
    int64_t getGatherDim() { return getDim().value_or(0); }
  }];
}

def Cpc_AllToAllOp : Cpc_Op<"all_to_all", [Cpc_GroupCollective, Cpc_RankDependent, DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "Moves a split from one dim to another: every rank sends block j of `split_dim` to rank j";
  let description = [{
    Resharding without replication: each rank of a group cuts its value into one block per rank
    along `split_dim`, sends block j to the group's rank j, and joins the blocks it receives
    along `concat_dim` in rank order. A value split over the axes along `concat_dim` comes out
    split over them along `split_dim`; each rank sends (n-1)/n of its block, where gathering
    and slicing would receive (n-1) blocks. A collective.
    Example: `cpc.all_to_all %x over @mesh ["tp"] {split_dim = 1 : i64, concat_dim = 0 : i64} : tensor<2x8xf32> -> tensor<4x4xf32>`
  }];
  let arguments = (ins Cpc_Tensor:$input, FlatSymbolRefAttr:$mesh, StrArrayAttr:$mesh_axes, I64Attr:$split_dim,
                       I64Attr:$concat_dim);
  let results = (outs Cpc_Tensor:$result);
  let assemblyFormat = "$input `over` $mesh $mesh_axes attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Cpc_ReduceScatterOp : Cpc_Op<"reduce_scatter", [Cpc_GroupCollective, Cpc_CombiningCollective, Cpc_RankDependent, DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "Sums a value over mesh axes; each rank keeps its block of dim `dim` (0 when unset) of the sum";
  let description = [{
    Half of an all-reduce: with all_gather after it, the same traffic; without, each rank holds
    only its share of the sum (ZeRO-2's gradient shards; sequence parallelism's row-parallel
    outputs, split along the sequence). A collective.
  }];
  let arguments = (ins Cpc_Tensor:$input, FlatSymbolRefAttr:$mesh, StrArrayAttr:$mesh_axes,
                       OptionalAttr<I64Attr>:$dim);
  let results = (outs Cpc_Tensor:$result);
  let assemblyFormat = "$input `over` $mesh $mesh_axes attr-dict `:` type($input) `->` type($result)";
  let builders = [
    // Along dim 0 (the attribute left unset).
    OpBuilder<(ins "::mlir::Type":$result, "::mlir::Value":$input, "::mlir::FlatSymbolRefAttr":$mesh,
                   "::mlir::ArrayAttr":$mesh_axes), [{
      build($_builder, $_state, result, input, mesh, mesh_axes, ::mlir::IntegerAttr());
    }]>,
  ];
  let extraClassDeclaration = [{
    /// The dim whose blocks the ranks keep (unset: 0, which plans then do not mention).
    int64_t getScatterDim() { return getDim().value_or(0); }
  }];
}

def Cpc_BroadcastFromOp : Cpc_Op<"broadcast_from", [Cpc_GroupCollective, Cpc_RankDependent, SameOperandsAndResultType,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "Every rank of a group gets the value of the member at coordinate `root` along `mesh_axes`";
  let description = [{
    A collective over the ranks that differ only along the one mesh axis in `mesh_axes`: the member
    whose coordinate on it is `root` sends its value, every member (the root too) returns it.
    SUMMA's step t broadcasts block t of a row or column this way, so that no rank holds a whole
    row of blocks. Not Pure: never reordered or dropped.
    Example: `cpc.broadcast_from %x over @mesh ["tp_col"] root 1 : tensor<2x4xf32>`
  }];
  let arguments = (ins Cpc_Tensor:$input, FlatSymbolRefAttr:$mesh, StrArrayAttr:$mesh_axes, I64Attr:$root);
  let results = (outs Cpc_Tensor:$result);
  let assemblyFormat = "$input `over` $mesh $mesh_axes `root` $root attr-dict `:` type($input)";
}

def Cpc_ReduceToOp : Cpc_Op<"reduce_to", [Cpc_GroupCollective, Cpc_CombiningCollective, Cpc_RankDependent, SameOperandsAndResultType,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "Sums a value over a group into the member at coordinate `root`; the others get zeros";
  let description = [{
    A collective over the ranks that differ only along the one mesh axis in `mesh_axes`: the member
    whose coordinate on it is `root` returns the sum of every member's value, the others return
    zeros, so that the results of one reduce_to per root add up to each rank's own sum (SUMMA's
    input and weight gradients: q broadcasts and q reduces). Not Pure.
    Example: `cpc.reduce_to %p over @mesh ["tp_col"] root 0 : tensor<2x4xf32>`
  }];
  let arguments = (ins Cpc_Tensor:$input, FlatSymbolRefAttr:$mesh, StrArrayAttr:$mesh_axes, I64Attr:$root);
  let results = (outs Cpc_Tensor:$result);
  let assemblyFormat = "$input `over` $mesh $mesh_axes `root` $root attr-dict `:` type($input)";
}

def Cpc_SendOp : Cpc_Op<"send", [Cpc_PointToPoint, Cpc_RankDependent, DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "Sends a value to the rank at coordinate `peer` along mesh axis `mesh_axis` (pipeline stages)";
  let description = [{
    Point-to-point: the receiving rank has this rank's coordinates on every other axis and
    issues the cpc.recv of the same `channel` with this rank's coordinate as its `peer`. Not
    Pure: never reordered or dropped.
    Example: `cpc.send %x to @mesh ["pp" = 1] channel 3 : tensor<2x4xf32>`
  }];
  let arguments = (ins Cpc_Tensor:$input, FlatSymbolRefAttr:$mesh, StrAttr:$mesh_axis, I64Attr:$peer,
                       I64Attr:$channel);
  let assemblyFormat = "$input `to` $mesh ` ` `[` $mesh_axis `=` $peer `]` `channel` $channel attr-dict `:` type($input)";
}

def Cpc_RecvOp : Cpc_Op<"recv", [Cpc_PointToPoint, Cpc_RankDependent, DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "Receives a value from the rank at coordinate `peer` along mesh axis `mesh_axis`";
  let description = [{
    The counterpart of cpc.send: the value the rank at `peer` (this rank's coordinates on the
    other axes) sends on `channel`, of the result's type.
    Example: `%x = cpc.recv from @mesh ["pp" = 0] channel 3 : tensor<2x4xf32>`
  }];
  let arguments = (ins FlatSymbolRefAttr:$mesh, StrAttr:$mesh_axis, I64Attr:$peer, I64Attr:$channel);
  let results = (outs Cpc_Tensor:$result);
  let assemblyFormat = "`from` $mesh ` ` `[` $mesh_axis `=` $peer `]` `channel` $channel attr-dict `:` type($result)";
}

def Cpc_ShardSliceOp : Cpc_Op<"shard_slice", [Cpc_RankDependent, Pure, DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "This rank's block of a value that every rank holds whole";
  let description = [{
    Splits each dim over the mesh axes that `sharding` assigns to it and keeps the block of
    this rank's mesh coordinate (e.g. its rows of a constant with a batch dim). Needs no
    communication.
  }];
  let arguments = (ins Cpc_Tensor:$input, Cpc_ShardingAttr:$sharding);
  let results = (outs Cpc_Tensor:$result);
  let assemblyFormat = "$input `to` $sharding attr-dict `:` type($input) `->` type($result)";
}

#endif // CPC_OPS_TD
