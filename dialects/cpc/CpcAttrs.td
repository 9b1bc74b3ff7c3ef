//===- CpcAttrs.td - cpc attributes ------------------------*- tablegen -*-===//
#ifndef CPC_ATTRS_TD
#define CPC_ATTRS_TD

include "dialects/cpc/CpcBase.td"
include "mlir/IR/EnumAttr.td"

def Cpc_ShardingAttr : AttrDef<Cpc_Dialect, "Sharding"> {
  let mnemonic = "sharding";
  let summary = "How a tensor is laid out over a device mesh";
  let description = [{
    `dim_axes[i]` lists the mesh axes that split tensor dim `i` (major to minor; empty means
    replicated along that dim). `partial_axes` lists mesh axes over which each rank holds a
    partial value, to be combined by `reduction` (sum, the default: e.g. gradients of
    replicated parameters under data parallelism; or max: a max over a split dim).
    `priority` orders annotations for propagation: 0 (the default) first; a value keeps what
    a lower number gave it. Propagated layouts carry none.

    Example: `#cpc.sharding<@mesh, [["dp"], [], ["tp"]], partial = ["pp"]>`,
    `#cpc.sharding<@mesh, [[], []], partial = ["tp"], reduction = max>`,
    `#cpc.sharding<@mesh, [["dp"], []], priority = 2>`
  }];
  let parameters = (ins
    "::mlir::FlatSymbolRefAttr":$mesh,
    "::mlir::ArrayAttr":$dim_axes,
    OptionalParameter<"::mlir::ArrayAttr">:$partial_axes,
    DefaultValuedParameter<"::cpc::ReductionKind", "::cpc::ReductionKind::Sum">:$reduction,
    DefaultValuedParameter<"int64_t", "0">:$priority);
  // The optional tail ", partial = [...], reduction = max, priority = N" is parsed by hand: its
  // groups share the leading comma, which the generated parser cannot tell apart.
  let assemblyFormat = "`<` $mesh `,` $dim_axes `` custom<ShardingTail>($partial_axes, $reduction, $priority) `>`";
  let builders = [AttrBuilder<(ins "::mlir::FlatSymbolRefAttr":$mesh, "::mlir::ArrayAttr":$dim_axes,
                                   "::mlir::ArrayAttr":$partial_axes), [{
    return $_get($_ctxt, mesh, dim_axes, partial_axes, ::cpc::ReductionKind::Sum, 0);
  }]>];
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// Mesh axes splitting dim `dim` (empty when replicated).
    ::llvm::SmallVector<::llvm::StringRef> getAxesOfDim(unsigned dim) const;
    /// Mesh axes over which the value is a partial value (combined by getReduction()).
    ::llvm::SmallVector<::llvm::StringRef> getPartialAxisNames() const;
  }];
}

//===----------------------------------------------------------------------===//
// Roles: what a training variable, function or runtime input is. Every layer (passes, plan,
// runtime) reads these attributes; none infers a role from a name.
//===----------------------------------------------------------------------===//

def Cpc_StateRole : I32EnumAttr<"StateRole", "what a persistent training variable holds", [
    I32EnumAttrCase<"GradAccumulator", 0, "gradient_accumulator">,
    I32EnumAttrCase<"ExpAvg", 1, "exp_avg">,
    I32EnumAttrCase<"ExpAvgSq", 2, "exp_avg_sq">,
    // Dynamic loss scaling (fp16): the scale, clean steps since it last changed, and overflows
    // since then (Colossal's hysteresis).
    I32EnumAttrCase<"LossScale", 3, "loss_scale">,
    I32EnumAttrCase<"GrowthTracker", 4, "growth_tracker">,
    I32EnumAttrCase<"OverflowTracker", 5, "overflow_tracker">]> {
  let cppNamespace = "::cpc";
  let genSpecializedAttr = 0;
}
def Cpc_StateRoleAttr : EnumAttr<Cpc_Dialect, Cpc_StateRole, "state_role"> {
  let assemblyFormat = "`<` $value `>`";
  let summary = "Role of a cpc.state variable: gradient accumulator, an AdamW moment, or loss-scaler state";
}

def Cpc_Phase : I32EnumAttr<"Phase", "which part of a training step (or an inference run) a function is", [
    I32EnumAttrCase<"TrainStep", 0, "train_step">,
    I32EnumAttrCase<"Accumulate", 1, "accumulate">,
    I32EnumAttrCase<"Apply", 2, "apply">,
    I32EnumAttrCase<"Forward", 3, "forward">,
    I32EnumAttrCase<"Backward", 4, "backward">,
    I32EnumAttrCase<"Infer", 5, "infer">]> {
  let cppNamespace = "::cpc";
  let genSpecializedAttr = 0;
}
def Cpc_PhaseAttr : EnumAttr<Cpc_Dialect, Cpc_Phase, "phase"> {
  let assemblyFormat = "`<` $value `>`";
  let summary = "Marks a training or inference function (attribute `cpc.phase` on func.func)";
  let description = [{
    `train_step`: forward, backward and update of one microbatch. With gradient accumulation,
    `accumulate` adds one microbatch's gradients into the accumulators and `apply` averages,
    clips and updates. With pipeline parallelism a microbatch's `accumulate` is cut into a
    `forward` and a `backward` function per model chunk (`cpc.pipeline_stage`), and `apply`
    into one function per pipeline rank. `infer`: the model's forward alone, the program of an
    inference plan that is sharded (dp, tp); with pipeline stages it is cut into `forward`
    functions per chunk. The runtime runs functions by phase, never by name.
  }];
}

def Cpc_RuntimeInput : I32EnumAttr<"RuntimeInput", "a function input the runtime computes", [
    I32EnumAttrCase<"LearningRate", 0, "learning_rate">,
    I32EnumAttrCase<"Step", 1, "step">]> {
  let cppNamespace = "::cpc";
  let genSpecializedAttr = 0;
}
def Cpc_RuntimeInputAttr : EnumAttr<Cpc_Dialect, Cpc_RuntimeInput, "runtime_input"> {
  let assemblyFormat = "`<` $value `>`";
  let summary = "Marks an argument the runtime binds each step (attribute `cpc.runtime`)";
}

def Cpc_ReductionKind : I32EnumAttr<"ReductionKind", "how a collective combines the ranks' values", [
    I32EnumAttrCase<"Sum", 0, "sum">,
    I32EnumAttrCase<"Max", 1, "max">]> {
  let cppNamespace = "::cpc";
  let genSpecializedAttr = 0;
}
def Cpc_ReductionKindAttr : EnumAttr<Cpc_Dialect, Cpc_ReductionKind, "reduction"> {
  let assemblyFormat = "`<` $value `>`";
  let summary = "The reduction of an all_reduce: sum (partial sums) or max (e.g. a softmax's max)";
}

//===----------------------------------------------------------------------===//
// Closed sets of choices an op makes: enums, so that a misspelt choice cannot parse and the
// runtime's decoders are generated from the same cases (cpc-tblgen).
//===----------------------------------------------------------------------===//

def Cpc_GeluApproximation : I32EnumAttr<"GeluApproximation", "GELU's form", [
    I32EnumAttrCase<"None", 0, "none">,
    I32EnumAttrCase<"Tanh", 1, "tanh">]> {
  let cppNamespace = "::cpc";
  let genSpecializedAttr = 0;
}
def Cpc_GeluApproximationAttr : EnumAttr<Cpc_Dialect, Cpc_GeluApproximation, "gelu_approximation"> {
  let assemblyFormat = "`<` $value `>`";
  let summary = "GELU exact (none: x * Phi(x), by erf) or its tanh approximation";
}

def Cpc_FusedActivation : I32EnumAttr<"FusedActivation", "the activation a fused GEMM applies after its bias", [
    I32EnumAttrCase<"None", 0, "none">,
    I32EnumAttrCase<"Gelu", 1, "gelu">]> {
  let cppNamespace = "::cpc";
  let genSpecializedAttr = 0;
}
def Cpc_FusedActivationAttr : EnumAttr<Cpc_Dialect, Cpc_FusedActivation, "activation"> {
  let assemblyFormat = "`<` $value `>`";
  let summary = "The activation of cpc.matmul_bias: none or gelu";
}

def Cpc_AttentionLayout : I32EnumAttr<"AttentionLayout", "where attention's heads lie", [
    // q [..., H, N, D]: heads among the batch dims.
    I32EnumAttrCase<"HeadMajor", 0, "bhnd">,
    // q [..., N, H, D]: each token's heads side by side, as a Linear writes them.
    I32EnumAttrCase<"TokenMajor", 1, "bnhd">]> {
  let cppNamespace = "::cpc";
  let genSpecializedAttr = 0;
}
def Cpc_AttentionLayoutAttr : EnumAttr<Cpc_Dialect, Cpc_AttentionLayout, "attention_layout"> {
  let assemblyFormat = "`<` $value `>`";
  let summary = "The operand layout of cpc.attention: bhnd (head-major) or bnhd (token-major)";
}

def Cpc_ScatterReduction : I32EnumAttr<"ScatterReduction", "how scatter_nd combines updates with the data", [
    I32EnumAttrCase<"None", 0, "none">,
    I32EnumAttrCase<"Add", 1, "add">,
    I32EnumAttrCase<"Mul", 2, "mul">,
    I32EnumAttrCase<"Max", 3, "max">,
    I32EnumAttrCase<"Min", 4, "min">]> {
  let cppNamespace = "::cpc";
  let genSpecializedAttr = 0;
}
def Cpc_ScatterReductionAttr : EnumAttr<Cpc_Dialect, Cpc_ScatterReduction, "scatter_reduction"> {
  let assemblyFormat = "`<` $value `>`";
  let summary = "The combination of cpc.scatter_nd: none (replace), add, mul, max or min";
}

//===----------------------------------------------------------------------===//
// Choices of a compilation: pass and pipeline options (clEnumValN lists of the same cases).
//===----------------------------------------------------------------------===//

def Cpc_Precision : I32EnumAttr<"Precision", "the arithmetic of training", [
    I32EnumAttrCase<"FP32", 0, "fp32">,
    // 16-bit matmuls and convolutions, f32 master weights (bf16: f32's range, no loss scaling).
    I32EnumAttrCase<"BF16", 1, "bf16">,
    // The same in f16, with dynamic loss scaling.
    I32EnumAttrCase<"FP16", 2, "fp16">]> {
  let cppNamespace = "::cpc";
  let genSpecializedAttr = 0;
}

def Cpc_RecomputeMode : I32EnumAttr<"RecomputeMode", "which forward activations the backward computes again", [
    I32EnumAttrCase<"None", 0, "none">,
    // What is cheap to run again (no GEMM, attention or collective): LayerNorm and GELU outputs,
    // biases, reshapes; the expensive ops' outputs are kept (Megatron's selective recompute,
    // generalised by cost class).
    I32EnumAttrCase<"Selective", 1, "selective">,
    // Every segment's forward, from the values that cross into it (Megatron's full recompute).
    I32EnumAttrCase<"Full", 2, "full">,
    // Per value, the set cheapest to run again (by the cost model's seconds per byte freed) that
    // frees a given number of bytes: the compiler picks the bytes so the plan fits its budget.
    I32EnumAttrCase<"Auto", 3, "auto">]> {
  let cppNamespace = "::cpc";
  let genSpecializedAttr = 0;
}

def Cpc_TensorParallelMode : I32EnumAttr<"TensorParallelMode", "how tensor parallelism lays the tp ranks out", [
    I32EnumAttrCase<"OneD", 0, "1d">,        // Megatron: one tp axis
    I32EnumAttrCase<"TwoD", 1, "2d">,        // Optimus: tp = q*q, tp_row x tp_col
    I32EnumAttrCase<"TwoHalfD", 2, "2.5d">,  // Tesseract: tp = d*q*q, tp_dep x tp_row x tp_col
    I32EnumAttrCase<"ThreeD", 3, "3d">]> {   // tp = q*q*q, tp_wt x tp_in x tp_out
  let cppNamespace = "::cpc";
  let genSpecializedAttr = 0;
}

def Cpc_MeshAxisRole : I32EnumAttr<"MeshAxisRole", "what a mesh axis is for, where a strategy needs to know", [
    I32EnumAttrCase<"None", 0, "none">,
    // 2D and 2.5D tensor parallelism (SUMMA): the q x q grid and the depth of 2.5D's copies.
    I32EnumAttrCase<"TensorRow", 1, "tensor_row">,
    I32EnumAttrCase<"TensorCol", 2, "tensor_col">,
    I32EnumAttrCase<"TensorDepth", 3, "tensor_depth">,
    // 3D tensor parallelism (q x q x q): the weight, input and output axes.
    I32EnumAttrCase<"TensorWeight", 4, "tensor_weight">,
    I32EnumAttrCase<"TensorInput", 5, "tensor_input">,
    I32EnumAttrCase<"TensorOutput", 6, "tensor_output">]> {
  let cppNamespace = "::cpc";
  let genSpecializedAttr = 0;
}
def Cpc_MeshAxisRoleAttr : EnumAttr<Cpc_Dialect, Cpc_MeshAxisRole, "axis_role"> {
  let assemblyFormat = "`<` $value `>`";
  let summary = "The role of a cpc.mesh axis: 2D/2.5D and 3D tensor parallelism find their axes by it";
}
def Cpc_MeshAxisRolesAttr : TypedArrayAttrBase<Cpc_MeshAxisRoleAttr, "one role per mesh axis">;

#endif // CPC_ATTRS_TD
