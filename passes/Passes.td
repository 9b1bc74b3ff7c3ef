//===- Passes.td - cpc passes ------------------------------*- tablegen -*-===//
#ifndef CPC_PASSES_TD
#define CPC_PASSES_TD

include "mlir/Pass/PassBase.td"

def CpcFuseGelu : Pass<"cpc-fuse-gelu"> {
  let summary = "Replace the erf (and tanh) expansions of GELU that exporters emit with cpc.gelu";
  let description = [{
    torch.onnx.export writes exact GELU as `x * 0.5 * (1 + erf(x / sqrt(2)))` (in any operand
    order). One `cpc.gelu` is cheaper to run and has a single, exact VJP rule.
  }];
  let dependentDialects = ["::cpc::CpcDialect"];
}

def CpcFoldLayerNorm : Pass<"cpc-fold-layer-norm"> {
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
  ];
  let dependentDialects = ["::cpc::CpcDialect", "::mlir::func::FuncDialect"];
}

#endif
