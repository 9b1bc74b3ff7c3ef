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

#endif
