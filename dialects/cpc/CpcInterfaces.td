//===- CpcInterfaces.td - cpc op interfaces ----------------*- tablegen -*-===//
#ifndef CPC_INTERFACES_TD
#define CPC_INTERFACES_TD

include "mlir/IR/OpBase.td"

def Cpc_VJPOpInterface : OpInterface<"VJPOpInterface"> {
  let cppNamespace = "::cpc";
  let description = [{
    The reverse-mode rule of a differentiable op: given the gradients of its results (null
    where a result has none), build the gradients of its operands. Each op's rule lives in
    VJPRules.cpp; the autodiff pass only walks the graph.
  }];
  let methods = [
    InterfaceMethod<[{
        Appends one gradient per operand to `operandGrads` (null for operands that get none,
        e.g. indices). `resultGrads` has one entry per result. Fails with a diagnostic when an
        operand that needs a gradient cannot get one.
      }],
      "::mlir::LogicalResult", "buildVJP",
      (ins "::mlir::OpBuilder &":$builder, "::mlir::ArrayRef<::mlir::Value>":$resultGrads,
           "::llvm::ArrayRef<bool>":$needGrad,
           "::llvm::SmallVectorImpl<::mlir::Value> &":$operandGrads)>,
  ];
}

#endif
