//===- Passes.td - cpc passes ------------------------------*- tablegen -*-===//
#ifndef CPC_PASSES_TD
#define CPC_PASSES_TD

include "mlir/Pass/PassBase.td"

def CpcFuseGelu : InterfacePass<"cpc-fuse-gelu", "::mlir::FunctionOpInterface"> {
  let summary = "Replace the erf (and tanh) expansions of GELU that exporters emit with cpc.gelu";
  let description = [{
    torch.onnx.export writes exact GELU as `x * 0.5 * (1 + erf(x / sqrt(2)))` (in any operand
    order). One `cpc.gelu` is cheaper to run and has a single, exact VJP rule.
  }];
  let dependentDialects = ["::cpc::CpcDialect"];
}

def CpcFuseAttention : InterfacePass<"cpc-fuse-attention", "::mlir::FunctionOpInterface"> {
  let summary = "Replace matmul(q, k^T), scale, softmax, matmul(., v) with one cpc.attention";
  let description = [{
    Runs at import, with the other fusions of what exporters expand: scaled dot-product
    attention written as its steps (scores, a scalar scale, softmax over the last dim, the product
    with v) becomes cpc.attention, whose kernels write the N x M scores once (as the
    probabilities its VJP, cpc.attention_grad, reads) instead of three times. Intermediates with
    other uses keep the pattern unfused. An attention whose q, k and v are transposed from
    [..., N, H, D] (directly, or as scalar gathers from one transposed qkv tensor) and whose
    result is transposed back takes them in that order instead (layout "bnhd"), so that neither
    the transposes nor their gradients are materialised.
  }];
  let dependentDialects = ["::cpc::CpcDialect"];
}

def CpcFuseOptimizer : InterfacePass<"cpc-fuse-optimizer", "::mlir::FunctionOpInterface"> {
  let summary = "Fuse the gradient norm's squares into their sum and the clip's scale into AdamW";
  let description = [{
    Late, on per-rank IR (with cpc-fuse-epilogues): reduce_sum(x * x) whose square has no other
    reader becomes cpc.reduce_sum_squares(x), and an AdamW whose gradient is g * s (s rank 0,
    the clip coefficient) reads g and takes s as its grad_scale. Each saves a pass writing a
    copy of every gradient; the results are the separate ops' bit for bit on the CPU.
  }];
  let dependentDialects = ["::cpc::CpcDialect"];
}

def CpcGroupAdamW : InterfacePass<"cpc-group-adamw", "::mlir::FunctionOpInterface"> {
  let summary = "Group a step's AdamW updates into one cpc.multi_tensor_adamw";
  let description = [{
    Last, on per-rank IR: the cpc.adamw ops of a function that share lr, step, grad scale,
    betas, epsilon and element type, and whose results only feed assigns, become one
    multi-tensor op at the first of them (reads of later members hoisted there when no assign to
    their variable comes between), so that a GPU updates every parameter in a few launches.
  }];
  let dependentDialects = ["::cpc::CpcDialect"];
}

def CpcFuseResidualNorm : InterfacePass<"cpc-fuse-residual-norm", "::mlir::FunctionOpInterface"> {
  let summary = "Fuse residual adds with the LayerNorm after them, and their gradients";
  let description = [{
    Late, on per-rank IR (before cpc-fuse-epilogues): layer_norm(add(a, b)) becomes one
    cpc.add_layer_norm (the sum stays a result: the residual stream), and the backward's
    add(layer_norm_grad(...)'s input gradient, r) one cpc.layer_norm_grad_add, so that the sum or
    the finished gradient is written while its row is in cache instead of being written and read
    back by another kernel. f32 and f64 only; operands of one type (no broadcasting); the add's
    other readers must come after the LayerNorm, and r must be available at the layer_norm_grad.
  }];
  let dependentDialects = ["::cpc::CpcDialect"];
}

def CpcFuseEpilogues : InterfacePass<"cpc-fuse-epilogues", "::mlir::FunctionOpInterface"> {
  let summary = "Fuse a Linear's bias add (and the GELU after it) into its matmul: cpc.matmul_bias";
  let description = [{
    The last pass before a plan is built (per-rank shapes, after partitioning): a matmul whose
    only use adds a vector along its last dim becomes one cpc.matmul_bias, so that the GPU adds
    the bias (and GELU) in the GEMM's epilogue instead of two more passes over the result. A
    GELU of the sum joins it; the sum stays a result (`preactivation`) when anything else reads
    it (the backward's gelu_grad).
  }];
  let dependentDialects = ["::cpc::CpcDialect"];
}

def CpcFoldLayerNorm : InterfacePass<"cpc-fold-layer-norm", "::mlir::FunctionOpInterface"> {
  let summary = "Fold the opset-13 LayerNormalization decomposition into cpc.layer_norm";
  let description = [{
    Before opset 17, torch exports LayerNorm as ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt,
    Div, then Mul/Add with the affine parameters. This pass matches that chain over trailing
    dims and emits one `cpc.layer_norm`.
  }];
  let dependentDialects = ["::cpc::CpcDialect"];
}

def CpcAutodiff : Pass<"cpc-autodiff", "::mlir::ModuleOp"> {
  let summary = "Reverse-mode differentiation of a loss function with respect to its trainable parameters";
  let description = [{
    For `@<func>` whose first result is a scalar float loss, adds `@<func>_grad` returning the
    loss and then one gradient per trainable `cpc.parameter` (result attribute `cpc.grad_of`),
    in the order the parameters appear. Only values that depend on a trainable parameter and
    that the loss depends on get gradients (activity analysis): frozen parameters, integer paths
    (indices, masks) and constants get none. Forward values the backward needs stay ordinary
    SSA values (the saved activations). Each op's rule comes from its VJPOpInterface.
  }];
  let options = [
    Option<"funcName", "func", "std::string", /*default=*/"\"main\"", "The loss function to differentiate">,
    Option<"lossScale", "loss-scale", "double", /*default=*/"0.0",
           "Dynamic loss scaling: seed the backward with the loss-scale state (a `cpc.state <loss_scale>` "
           "starting at this value) instead of 1, so every gradient comes out scaled (0 = off)">,
  ];
  let dependentDialects = ["::cpc::CpcDialect", "::mlir::func::FuncDialect"];
}

def CpcMixedPrecision : Pass<"cpc-mixed-precision", "::mlir::ModuleOp"> {
  let summary = "Autocast the loss function: 16-bit matmul/conv, f32 for sensitive ops, f32 master weights";
  let description = [{
    Follows torch.autocast's op lists, read from each op's autocast trait: ops marked
    AutocastLowPrecision (matmul, conv2d) compute in the 16-bit type; ops marked
    AutocastFullPrecision (softmax, layer_norm, reduce_sum/mean/prod, exp, log, pow, rsqrt,
    reciprocal) in f32; every other float op in the widest float type of its operands, where a
    one-element constant and the parameter-only bias added to a 16-bit result do not count.
    Each value is cast at most once per type, right after its definition: a trainable
    parameter stays the f32 master weight and is cast to 16-bit once per step; autodiff then
    gives 16-bit gradients inside the 16-bit region and f32 gradients for the parameters. The
    function keeps its signature (results are cast back). Runs before cpc-autodiff.
  }];
  let options = [
    Option<"precision", "precision", "::cpc::Precision", /*default=*/"::cpc::Precision::BF16", "fp32 (no change), bf16 or fp16",
           [{::llvm::cl::values(CPC_PRECISION_VALUES)}]>,
    Option<"funcName", "func", "std::string", /*default=*/"\"main\"", "The loss function">,
  ];
  let dependentDialects = ["::cpc::CpcDialect", "::mlir::func::FuncDialect"];
}

def CpcInferenceProgram : Pass<"cpc-inference-program", "::mlir::ModuleOp"> {
  let summary = "Mark the model function as the inference program (cpc.phase infer)";
  let description = [{
    An inference plan runs the imported model function itself; this pass gives it its role,
    `cpc.phase = #cpc.phase<infer>`. Data and tensor parallelism then shard it like a training
    step (cpc-tensor-parallel, cpc-data-parallel), the partitioner returns its results whole on
    every rank (they are the model's outputs: a batch split over dp is all-gathered, a partial
    sum all-reduced), cpc-pipeline-split cuts it into one forward program per model chunk, and
    the runtime finds it by its phase.
  }];
  let options = [
    Option<"funcName", "func", "std::string", /*default=*/"\"main\"", "The model function">,
  ];
  let dependentDialects = ["::cpc::CpcDialect", "::mlir::func::FuncDialect"];
}

def CpcBuildTrainStep : Pass<"cpc-build-train-step", "::mlir::ModuleOp"> {
  let summary = "Build the training step from a differentiated loss: accumulation, clipping, AdamW";
  let description = [{
    Consumes `@main_grad` (from cpc-autodiff) and adds the functions the runtime runs each step.
    With accumulation 1: `@train_step(inputs..., lr, step) -> (loss, grad_norm)`. With
    accumulation k > 1: `@accumulate(inputs...) -> loss`, run once per microbatch, adds the
    gradients into `grad_acc.<param>` states, and `@apply(lr, step) -> grad_norm` averages them,
    clips by global norm (clip 0 = off, as torch.nn.utils.clip_grad_norm_), runs AdamW with
    moments in `adamw.exp_avg.<param>` / `adamw.exp_avg_sq.<param>` states, assigns the new
    parameters and zeroes the accumulators. Parameters matching `no-weight-decay` regexes, and
    with `default-no-decay` all 1-D parameters and names ending in ".bias", get no weight decay.
    `lr` and `step` are rank-0 f32 arguments the runtime supplies (attribute `cpc.runtime`,
    a `#cpc.runtime_input`). Roles are attributes that later passes, the plan and the runtime
    read: each function's `cpc.phase` (`#cpc.phase<train_step|accumulate|apply>`) and each
    state's role (`cpc.state <gradient_accumulator|exp_avg|exp_avg_sq>`); names are labels.
    With `loss-scale` (fp16), the update first unscales the gradients by the `loss_scale`
    state; a non-finite global norm (an inf or NaN in any gradient: the norm's sum of squares
    is reduced over every rank, so all ranks agree) skips the step: every assigned parameter
    and moment keeps its value (the runtime then does not advance the optimizer step). The
    scale backs off or grows as torch's GradScaler (and Colossal's hysteresis) do, and the
    function also returns `loss_scale` (the scale this step used) and `overflow` (1 if skipped).
  }];
  let options = [
    Option<"accumulation", "accumulation", "int64_t", /*default=*/"1", "Microbatches per step">,
    Option<"clipGradNorm", "clip-grad-norm", "double", /*default=*/"0.0", "Global-norm clip (0 = off)">,
    Option<"beta1", "beta1", "double", /*default=*/"0.9", "AdamW beta1">,
    Option<"beta2", "beta2", "double", /*default=*/"0.999", "AdamW beta2">,
    Option<"epsilon", "epsilon", "double", /*default=*/"1e-8", "AdamW epsilon">,
    Option<"weightDecay", "weight-decay", "double", /*default=*/"0.0", "Decoupled weight decay">,
    ListOption<"noWeightDecay", "no-weight-decay", "std::string", "Regexes of parameters without weight decay">,
    Option<"defaultNoDecay", "default-no-decay", "bool", /*default=*/"true",
           "No weight decay on 1-D parameters and names ending in .bias">,
    Option<"separateApply", "separate-apply", "bool", /*default=*/"false",
           "Build @accumulate and @apply even for one microbatch (pipeline parallelism)">,
    Option<"lossScale", "loss-scale", "double", /*default=*/"0.0",
           "Dynamic loss scaling from this initial scale (0 = off; the gradients of @main_grad are "
           "scaled, as cpc-autodiff loss-scale=S makes them)">,
    Option<"growthFactor", "growth-factor", "double", /*default=*/"2.0", "Loss scale x this after growth-interval clean steps">,
    Option<"backoffFactor", "backoff-factor", "double", /*default=*/"0.5", "Loss scale x this on an overflow">,
    Option<"growthInterval", "growth-interval", "int64_t", /*default=*/"2000", "Clean steps before the scale grows">,
    Option<"hysteresis", "hysteresis", "int64_t", /*default=*/"1",
           "Overflows since the last growth before the scale backs off (1: every one, as torch; Colossal: 2)">,
  ];
  let dependentDialects = ["::cpc::CpcDialect", "::mlir::func::FuncDialect"];
}

def CpcPrintShardingRules : Pass<"cpc-print-sharding-rules", "::mlir::ModuleOp"> {
  let summary = "Attach each op's sharding rule, in Shardy's notation, for inspection and tests";
  let description = [{
    Every op with a ShardingRuleOpInterface gets `cpc.sharding_rule = "..."`: its factors per
    operand and result dim ("([i, j], [j, k]) -> ([i, k]) {i=4, j=8, k=2} reduction={j}", a
    dim of several factors printed together, major first) and their kinds. Fails where a rule
    breaks its invariant (a dim whose factor sizes do not multiply to its size).
  }];
}

def CpcPropagateSharding : Pass<"cpc-propagate-sharding", "::mlir::ModuleOp"> {
  let summary = "Propagate sharding seeds over the ops' factor rules to every value";
  let description = [{
    Seeds are `cpc.sharding` attributes of function arguments, `cpc.shardings` attributes of
    op results (one #cpc.sharding per result) and `cpc.shard` ops. Layouts spread over the
    ops' factor rules (ShardingRuleOpInterface, ShardingRules.cpp) over any number of mesh
    axes, forward and backward to a fixpoint; a dim of several factors gives its axes to them
    major first. Seeds propagate in tiers of their `priority` (0 first); a value keeps the dims
    an earlier tier split and, within a tier, the first op in program order (forward, then
    backward) to split a dim decides. Arguments without a seed, parameters and states stay
    whole. A result is then marked partial where its op reduces a split factor (matmul K: sum;
    a max over a split dim: max) or passes a partial operand on. Every op with a split or
    partial result gets `cpc.shardings`; types stay global (cpc-partition makes them local).
  }];
  let options = [
    ListOption<"funcs", "funcs", "std::string", "Functions to propagate in (default: all)">,
  ];
  let dependentDialects = ["::cpc::CpcDialect", "::mlir::func::FuncDialect"];
}

def CpcPartition : Pass<"cpc-partition", "::mlir::ModuleOp"> {
  let summary = "Rewrite sharded functions into the program each rank of the mesh runs";
  let description = [{
    Reads the layouts that cpc-propagate-sharding recorded and makes every type local. A whole
    value that meets a split use is sliced (`cpc.shard_slice`); a split value that meets a use
    needing it whole (a dim without a factor, an op without a rule, a `cpc.shard` to whole) is
    gathered (`cpc.all_gather` along that dim); a partial sum is all-reduced where it meets an
    op that is not linear in it, a result or an assign, right after its producer. Means over
    split dims are scaled to add up to the global mean; gradient accumulators (`grad_acc.*`)
    hold partial sums over dp. `cpc.shard` ops disappear. Moving a split value to a different
    split is not supported yet.
  }];
  let options = [
    ListOption<"funcs", "funcs", "std::string",
               "Functions to partition (default: all; those without annotations use the module's one mesh)">,
  ];
  let dependentDialects = ["::cpc::CpcDialect", "::mlir::func::FuncDialect"];
}

def CpcHeadMajorQkv : Pass<"cpc-head-major-qkv", "::mlir::ModuleOp"> {
  let summary = "Keep fused qkv projections in head-major order, so that splitting them splits heads";
  let description = [{
    Torch's attention computes q, k and v with one Linear of 3*D outputs and reshapes them to
    [B, N, 3, H, Dh]: its weight rows run q's heads, then k's, then v's, so a contiguous block of
    rows is not whole heads. Where the heads divide by `tp`, this pass (run before autodiff)
    keeps the weight and bias in head-major order ([H, 3, Dh] rows: `stored_view` and
    `stored_perm` on the parameters, which the plan applies to the initial values and the
    runtime undoes on output) and reshapes the projection to [B, N, H, 3, Dh] followed by a
    transpose to [B, N, 3, H, Dh], the value the model had. A split of the rows over tp then
    gives each rank whole heads of q, k and v. Found from the graph: a Linear whose only use
    is a reshape of its output features into [3, H, Dh], or K equal slices of its output
    features each reshaped into [H, Dh] (Hugging Face GPT-2's c_attn and split): those take
    part j of the head-major features reshaped to [.., H, K, Dh] and transposed to
    [.., K, H, Dh], so that H stays split through them.
  }];
  let options = [
    Option<"tp", "tp", "int64_t", /*default=*/"2", "Tensor-parallel ranks the heads must divide by">,
  ];
  let dependentDialects = ["::cpc::CpcDialect"];
}

def CpcExpandLayerNorm : InterfacePass<"cpc-expand-layer-norm", "::mlir::FunctionOpInterface"> {
  let summary = "Write every cpc.layer_norm as its mean and variance (2D / 2.5D tensor parallelism)";
  let description = [{
    Runs before autodiff when the hidden dim of the activations is split (2D and 2.5D tensor
    parallelism split it over tp_col): mean = reduce_mean(x), var = reduce_mean((x - mean)^2),
    (x - mean) * rsqrt(var + epsilon) * scale + bias. Each statistic is then a partial sum over
    the columns, all-reduced by partitioning (2 all-reduces forward, their sums backward), and
    the rest is elementwise on the blocks.
  }];
  let dependentDialects = ["::cpc::CpcDialect"];
}

def CpcTensorParallel : Pass<"cpc-tensor-parallel", "::mlir::ModuleOp"> {
  let summary = "Choose the tensor-parallel split of the parameters (Megatron 1D) over a dp x tp mesh";
  let description = [{
    Adds `cpc.mesh @mesh shape = [dp, tp] axes = ["dp", "tp"]` (rank = dp index * tp + tp
    index: the tp ranks of one dp group are neighbours, as Megatron) and annotates parameters
    of the training functions (found by cpc.phase) with `cpc.shardings`; cpc-data-parallel's
    propagation and partitioning then do the rest (split storage, moments split alike, the
    collectives). The split comes from the graph's structure, never from names: a Linear
    followed by an activation and a second Linear (an MLP) makes the first column-parallel
    (weight and bias split by output features) and the second row-parallel (weight split by
    input features, its result a partial sum all-reduced over tp). Where the hidden size does
    not divide by tp, that MLP stays replicated and a note says so. With `sp` (sequence
    parallelism), the LayerNorm before each split block is split along the sequence over tp
    and the residual stream follows: each block's all-reduces become an all-gather before its
    column-parallel Linear and a reduce-scatter after its row-parallel one. `shard` overrides or adds
    splits by parameter name: "REGEX=SPEC", SPEC one entry per dim separated by `:` (or `,`
    outside a pass option, whose lists split at commas), `-` for whole or mesh axes joined by
    `*` (e.g. `blocks\.0\.mlp\.fc1\.weight=tp:-`); the last matching entry wins.

    `mode=2d` (Optimus) and `mode=2.5d` (Tesseract) factor tp into q x q (x d) sub-axes:
    the mesh is dp x [tp_dep x] tp_row x tp_col, the batch is split over dp, tp_dep and tp_row,
    every Linear's weight is split [in over tp_row, out over tp_col] and its bias and result's
    features over tp_col (replicated over depth: its gradients are partial sums over it), and
    cpc-partition computes each such matmul by SUMMA (broadcasts along rows and columns of
    ranks; Summa.cpp). `mode=3d` makes the mesh dp x tp_wt x tp_in x tp_out (q each): a Linear
    whose input rows are split over (tp_wt, x) and features over y ({x, y} = {tp_in, tp_out},
    followed through the forward ops: each Linear swaps them) gets its weight split [in over
    (y, tp_wt), out over x], and cpc-partition computes it by the 3D algorithm (all-gathers, a
    local GEMM, a reduce-scatter; Matmul3D.cpp). LayerNorms must be expanded first
    (cpc-expand-layer-norm).
  }];
  let options = [
    Option<"dp", "dp", "int64_t", /*default=*/"1", "Data-parallel ranks (the mesh's first axis)">,
    Option<"tp", "tp", "int64_t", /*default=*/"1", "Tensor-parallel ranks (the mesh's second axis)">,
    Option<"mode", "mode", "::cpc::TensorParallelMode", /*default=*/"::cpc::TensorParallelMode::OneD",
           "1d (Megatron), 2d (Optimus: tp = q*q, mesh axes tp_row x tp_col), 2.5d (Tesseract: "
           "tp = d*q*q, axes tp_dep x tp_row x tp_col) or 3d (tp = q*q*q, axes tp_wt x tp_in x tp_out)",
           [{::llvm::cl::values(CPC_TENSOR_PARALLEL_MODE_VALUES)}]>,
    Option<"depth", "depth", "int64_t", /*default=*/"1", "2.5d: the depth d">,
    Option<"megatron", "megatron", "bool", /*default=*/"true", "Split MLPs as Megatron does">,
    Option<"profile", "profile", "std::string", /*default=*/"",
           "search: the cost profile (cpc calibrate) that prices ops and collectives (default: built-in rates)">,
    Option<"search", "search", "bool", /*default=*/"false",
           "1d: choose every op's layout over tp by search (AutoSharding.h) instead of the Megatron patterns">,
    Option<"memoryBudget", "memory-budget", "int64_t", /*default=*/"0",
           "search: bytes per rank the parameters and optimizer states may hold (0: weights split by rule)">,
    Option<"sp", "sp", "bool", /*default=*/"false",
           "Sequence parallelism: LayerNorm and residual regions split along the sequence over tp">,
    ListOption<"shard", "shard", "std::string", "Manual splits: REGEX=SPEC (SPEC: dims as - or axis*axis)">,
  ];
  let dependentDialects = ["::cpc::CpcDialect", "::mlir::func::FuncDialect"];
}

def CpcDataParallel : Pass<"cpc-data-parallel", "::mlir::ModuleOp"> {
  let summary = "Shard the batch of the given functions over a `dp` mesh axis and partition them";
  let description = [{
    Adds `cpc.mesh @mesh shape = [size] axes = ["dp"]`, marks dim 0 of every non-runtime input
    of `funcs` as split over dp (`cpc.sharding` argument attributes), then does what
    cpc-propagate-sharding and cpc-partition do (the same code): layouts over the ops' factor
    rules, then the per-rank program with local shapes, `cpc.shard_slice` for whole values
    (constants) that meet split ones, and `cpc.all_reduce` where a partial sum (e.g. a weight
    gradient contracted over the split batch) reaches an op that is not linear in it, a result
    or an assign. The gradient all-reduce of data parallelism comes out of this rule. Gradients are
    reduced where backward produces them (cpc-bucket-all-reduce then merges them).
  }];
  let options = [
    Option<"size", "size", "int64_t", /*default=*/"1", "Data-parallel ranks">,
    ListOption<"funcs", "funcs", "std::string",
               "Functions whose batch inputs are split (default: phases train_step, accumulate, apply and infer)">,
  ];
  let dependentDialects = ["::cpc::CpcDialect", "::mlir::func::FuncDialect"];
}

def CpcSplitGradNorm : Pass<"cpc-split-grad-norm", "::mlir::ModuleOp"> {
  let summary = "Split the global gradient norm's squares over dp, as ZeRO splits the updates";
  let description = [{
    Runs on a 16-bit data-parallel plan without ZeRO (cpc-zero splits the norm itself), after
    cpc-tensor-parallel and before cpc-data-parallel. Each AdamW update's gradient term of the
    global norm (`g * g`, g the gradient or the operand of its scale by the clip) reads g through
    a `cpc.shard` of its whole layout and is seeded split over `dp` on the dim ZeRO would split
    the update on (the parameter's first dim that tensor parallelism left whole and that divides
    by dp): every rank squares one block of the all-reduced gradient and one all-reduce sums the
    shares, while the update stays whole. The norm then has the bits of ZeRO's, and its work is
    split over the ranks.
  }];
  let options = [
    Option<"dp", "dp", "int64_t", /*default=*/"2", "Data-parallel ranks (the @mesh to create when there is none)">,
    ListOption<"funcs", "funcs", "std::string", "Functions to seed in (default: phases train_step and apply)">,
  ];
  let dependentDialects = ["::cpc::CpcDialect"];
}

def CpcZero : Pass<"cpc-zero", "::mlir::ModuleOp"> {
  let summary = "ZeRO stages 1-3 as shardings: the optimizer states and the update (1), the gradients (2) and the parameters (3) split over dp";
  let description = [{
    Runs after cpc-tensor-parallel and before cpc-data-parallel, whose propagation and
    partitioning turn its seeds into the per-rank program. Every AdamW update gets its results
    split over `dp` on the first dim of the parameter that tensor parallelism left whole and
    that divides by dp: each rank updates and stores 1/dp of the moments and all-gathers the
    updated blocks into the parameter; the gradient's square in the global norm is split alike
    (each rank squares its block), and stage 1 keeps the gradient whole from where backward
    makes it. In mixed precision a master weight that every op reads through its 16-bit copy
    is stored split instead (DeepSpeed's 4Ψ+12Ψ/N and 2Ψ+14Ψ/N): the copy is cast from the
    block and gathered once per step, and a ZeRO-1 gradient is kept whole in 16 bits and
    widened on the slice the update reads. Stage 2 does not keep the gradient whole: it is
    reduce-scattered, never all-reduced, and the norm's terms stay partial sums over dp until
    its sqrt. Stage 3 also stores the parameter split over dp
    (`cpc.parameter` with `global_shape` and `sharding` after partitioning) and reads it through
    a `cpc.shard` of its tensor-parallel layout right before every other op that uses it (in
    any training function; its 16-bit copy likewise): the blocks are gathered there and the
    whole value lives only until that op. Parameters without such a dim keep a whole optimizer
    on every rank.
  }];
  let options = [
    Option<"stage", "stage", "int64_t", /*default=*/"1", "ZeRO stage (1, 2 or 3)">,
    Option<"dp", "dp", "int64_t", /*default=*/"2", "Data-parallel ranks (the @mesh to create when there is none)">,
    ListOption<"funcs", "funcs", "std::string",
               "Functions to shard in (default: phases train_step, accumulate and apply)">,
  ];
  let dependentDialects = ["::cpc::CpcDialect"];
}

def CpcPipelineStages : Pass<"cpc-pipeline-stages", "::mlir::ModuleOp"> {
  let summary = "Cut the forward model into pipeline chunks balanced by cost (labels ops with cpc.stage)";
  let description = [{
    Runs on the loss function before cpc-autodiff. Every op that depends on input data gets
    `cpc.stage = c`, its chunk: `chunks` contiguous runs in program order whose most expensive
    chunk (estimated seconds; with `backward`, forward plus gradient ops) is as cheap as possible, and among the cuts within `tolerance` of
    that, those with the fewest bytes live across the cuts (between residual blocks in a
    transformer). `split` names the cut points by hand: cut before the first op whose name
    contains each entry. Parameters and constants (and what is computed from them alone) get
    no label: every chunk that reads them has a copy. The module attribute
    `cpc.pipeline_chunks` records each chunk's op count, FLOPs, parameter and boundary bytes.
  }];
  let options = [
    Option<"funcName", "func", "std::string", /*default=*/"\"main\"", "The loss function to cut">,
    Option<"chunks", "chunks", "int64_t", /*default=*/"2", "Pipeline chunks (stages x virtual stages)">,
    Option<"tolerance", "tolerance", "double", /*default=*/"1.1",
           "How much dearer than the best-balanced cut the chosen chunks may be">,
    ListOption<"split", "split", "std::string", "Hand cut points: names of the first op of each chunk but the first">,
    Option<"profile", "profile", "std::string", /*default=*/"", "Cost profile (cpc calibrate) the ops are priced with (default: built-in rates)">,
    Option<"backward", "backward", "bool", /*default=*/"false",
           "Price each op's gradient as well (training): chunks are balanced by forward plus backward time">,
  ];
  let dependentDialects = ["::cpc::CpcDialect"];
}

def CpcRecomputeSegments : Pass<"cpc-recompute-segments", "::mlir::ModuleOp"> {
  let summary = "Cut the forward model into recompute segments (labels ops with cpc.recompute_segment)";
  let description = [{
    Runs on the loss function before cpc-autodiff, which copies each label onto the op's
    gradient ops; cpc-recompute then runs a segment's forward again in the backward from the
    values that cross into it (its checkpoints). Every op that depends on input data gets
    `cpc.recompute_segment = s`: contiguous runs in program order that minimise the activation
    memory of full recompute, the checkpoints (the bytes live across each cut) plus the largest
    segment's saved activations (what its gradient ops read, found on a differentiated copy):
    Chen et al.'s sqrt(n) checkpointing, solved for each bound on a segment's saved bytes by a
    dynamic program over the cut positions. In a transformer the cuts fall between residual
    blocks. Segments never straddle pipeline chunks (`cpc.stage`). The module attribute
    `cpc.recompute_segments` records each segment's ops, saved and checkpoint bytes.
  }];
  let options = [
    Option<"funcName", "func", "std::string", /*default=*/"\"main\"", "The loss function to cut">,
  ];
  let dependentDialects = ["::cpc::CpcDialect"];
}

def CpcRecompute : Pass<"cpc-recompute", "::mlir::ModuleOp"> {
  let summary = "Recompute forward activations in the backward (full or selective), from the segments' checkpoints";
  let description = [{
    Runs on the partitioned training functions (`train_step`, `accumulate`), before the
    pipeline split. A forward op belongs to the segment of its `cpc.recompute_segment` label,
    or, unlabelled (collectives, casts that partitioning and autocast add), to the latest
    segment among its forward operands; random draws outside the segments (a Replayable op
    that is not pure, such as Dropout's mask, and what is computed from draws alone) belong to
    the earliest segment that reads them, so a mask is drawn again rather than kept. The
    backward begins at the first op marked `cpc.backward`, and from there every op that reads a
    value is backward, marked or not (constants and variable reads belong to neither). A value
    of segment s is kept when a later segment's forward (or anything but s's forward and the
    backward) reads it, when its op cannot run twice (not
    pure, not a collective, not Replayable), and with `mode=selective` when its op is a GEMM,
    attention or a collective. Every other value of s that the backward reads is computed again:
    the ops of s it needs are copied, in order, right before the first backward op that reads
    one of them, and the backward reads the copies; the originals then die with the forward.
    A collective of parameters alone that a copy reads (ZeRO-3's all-gather before each use) is
    copied too, so that the forward's gathered parameter does not live into the backward.
    The copies are backward ops of the original's pipeline chunk. The last segment (whose
    backward starts as its forward ends) is left alone. Clones run the same kernels on the same
    operands: losses are bit-identical to no recompute. Drops the segment labels after.

    `mode=auto` decides per value instead: starting from keeping everything, it repeatedly
    stops keeping the value whose recompute frees the most bytes per second of ops run again
    (the ops copied to rebuild it from what is still kept, priced by the cost model; bytes the
    copies newly hold count against it), until the backward's peak of activations has fallen
    by `bytes` (running segment s, it holds what the segments before s keep and all of s's
    values, kept or computed again). Cheap ops' outputs (LayerNorm, GELU, softmax) go first,
    GEMM outputs last; `bytes` at least the activations gives full recompute. The compiler
    picks `bytes` for its `--device-memory`.
  }];
  let options = [
    Option<"mode", "mode", "::cpc::RecomputeMode", /*default=*/"::cpc::RecomputeMode::Full",
           "selective (what is cheap), full (every segment's forward) or auto (the cheapest per byte)",
           [{::llvm::cl::values(CPC_RECOMPUTE_MODE_VALUES)}]>,
    Option<"bytes", "bytes", "int64_t", /*default=*/"0",
           "mode=auto: the activation bytes to free in each training function (a microbatch)">,
    Option<"profile", "profile", "std::string", /*default=*/"",
           "mode=auto: the cost profile (cpc calibrate) that prices the ops run again">,
  ];
  let dependentDialects = ["::cpc::CpcDialect"];
}

def CpcPipelineSplit : Pass<"cpc-pipeline-split", "::mlir::ModuleOp"> {
  let summary = "Split the training step into per-chunk forward and backward programs and per-rank updates, joined by send/recv";
  let description = [{
    Runs after partitioning. `@accumulate` (one microbatch) becomes, for each chunk c,
    `@forward_c` and `@backward_c` (`cpc.phase` forward/backward, `cpc.pipeline_chunk` c,
    `cpc.pipeline_rank` c mod stages), and `@apply` one `@apply_r` per pipeline rank r. Each op
    goes to the chunk of its `cpc.stage` label (from cpc-pipeline-stages through autodiff) or,
    unlabeled (collectives, optimizer ops), where its operands are: a forward op no earlier than
    its operands' chunks, a backward op no later, an update op where most of its operand bytes
    live. A variable lives on every chunk that reads it, and an assign writes every copy.
    Parameters, constants and what is computed from them alone are copied into each program
    that uses them. A value read by another rank's program is sent right after it is computed
    (`cpc.send` over the `pp` mesh axis, one channel per value and destination) and received
    before its first use; a value read by a later program of the same rank (a saved activation,
    or one chunk feeding another on the same rank) leaves as a result and enters as an argument
    with `cpc.transfer` = its channel. Adds the `pp` axis to the mesh, outermost. An inference
    program (`cpc.phase` infer, cpc-inference-program) is cut the same way into `@forward_c`
    functions alone; each of its results leaves the chunk that computes it.
  }];
  let options = [
    Option<"stages", "stages", "int64_t", /*default=*/"2", "Pipeline ranks (the mesh's pp axis)">,
    Option<"chunks", "chunks", "int64_t", /*default=*/"2", "Model chunks (stages x virtual stages)">,
  ];
  let dependentDialects = ["::cpc::CpcDialect", "::mlir::func::FuncDialect"];
}

def CpcBucketAllReduce : InterfacePass<"cpc-bucket-all-reduce", "::mlir::FunctionOpInterface"> {
  let summary = "Merge consecutive all-reduces (and reduce-scatters) into buckets, one collective call each";
  let description = [{
    Walks each function in order, collecting single-value all-reduces over the same axes and
    element type; a bucket is closed before the first op that uses one of its members, or when
    it would exceed `bucket-bytes`, and is issued where its last member stood. 1-D
    reduce-scatters (ZeRO-2/3 gradients) are bucketed the same way: the members' inputs, each
    viewed as [ranks, block], are concatenated along dim 1, reduce-scattered once, and each
    member's block is sliced out of this rank's part.
  }];
  let options = [
    Option<"bucketBytes", "bucket-bytes", "int64_t", /*default=*/"4194304",
           "Largest all-reduce bucket (0: no merging). Small enough that the buckets before the last "
           "one go out while backward still runs">,
    Option<"scatterBucketBytes", "scatter-bucket-bytes", "int64_t", /*default=*/"4194304",
           "Largest reduce-scatter bucket (0: no merging). Kept small: the members live until their "
           "bucket goes out and are copied side by side, which ZeRO-2/3 pay in peak memory">,
  ];
  let dependentDialects = ["::cpc::CpcDialect"];
}

def CpcBucketAllGather : InterfacePass<"cpc-bucket-all-gather", "::mlir::FunctionOpInterface"> {
  let summary = "Merge all-gathers whose results only update variables into bucketed gathers";
  let description = [{
    ZeRO-1/2 all-gather every updated parameter block after its AdamW; the whole parameters are
    only assigned back. Such gathers (1-D blocks along dim 0, results used only through reshapes
    by `cpc.assign`) are merged in program order into buckets of at most `bucket-bytes` gathered
    bytes: the blocks are concatenated, gathered once, and each parameter is sliced out of the
    [ranks, bucket] result; the assigns move after the bucket (nothing reads a variable after
    its assign, so this does not change what any op reads).
  }];
  let options = [
    Option<"bucketBytes", "bucket-bytes", "int64_t", /*default=*/"26214400", "Largest bucket (0: no merging)">,
  ];
  let dependentDialects = ["::cpc::CpcDialect"];
}

#endif
