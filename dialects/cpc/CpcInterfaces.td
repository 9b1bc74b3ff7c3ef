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
    InterfaceMethod<[{
        Whether the op's results depend differentiably on its operands: false for
        cpc.stop_gradient, whose results autodiff treats as constants.
      }],
      "bool", "hasDerivative", (ins), [{}], [{ return true; }]>,
  ];
}

def Cpc_ShardingRuleOpInterface : OpInterface<"ShardingRuleOpInterface"> {
  let cppNamespace = "::cpc";
  let description = [{
    How an op's values may be split over a device mesh, in Shardy's terms: the op's factors
    (each with a size and a kind: pass-through, reduction, need-replication, permutation) and,
    for every dim of every operand and result, the factors it is made of, major first (a reshape
    [B, N, 3D] -> [B, N, 3, H, Dh] gives the input's last dim the factors 3, H and Dh). One
    propagation and one partitioning work off these rules for every op; each op's rule lives in
    ShardingRules.cpp. The default is the elementwise rule with numpy broadcasting.
  }];
  let methods = [
    InterfaceMethod<[{
        The factors of this op, read from its (global) types.
      }],
      "::cpc::ShardingRule", "getShardingRule", (ins), [{}],
      [{ return ::cpc::elementwiseShardingRule($_op.getOperation()); }]>,
    InterfaceMethod<[{
        Whether the op, given operand `index` as a partial value of reduction `kind` over some
        axes (and its other operands whole, or partial alike where it is add-like), produces
        results that are partial values of the same kind over the same axes: true for ops
        linear in it (sum) or that only move data (sum and max).
      }],
      "bool", "propagatesPartial", (ins "unsigned":$index, "::cpc::ReductionKind":$kind), [{}],
      [{ return false; }]>,
    InterfaceMethod<[{
        Called by partitioning once the op's operands and results are this rank's blocks (their
        types local, `operands` and `results` their layouts over the mesh): rewrites what the
        op's attributes say about shapes or blocks, e.g. which block of an indexed dim a gather
        holds. Most ops have nothing to rewrite.
      }],
      "void", "adaptToBlocks",
      (ins "::llvm::ArrayRef<::cpc::ShardingAttr>":$operands, "::llvm::ArrayRef<::cpc::ShardingAttr>":$results),
      [{}], [{ return; }]>,
    InterfaceMethod<[{
        Called by partitioning with the same layouts, after adaptToBlocks: the factor this rank's
        results are scaled by so that the ranks' partial results add up to the whole value (a
        mean over split dims is the mean of this rank's 1/n of the elements: 1/n). 1 for most ops.
      }],
      "double", "partialResultScale",
      (ins "::llvm::ArrayRef<::cpc::ShardingAttr>":$operands, "::llvm::ArrayRef<::cpc::ShardingAttr>":$results),
      [{}], [{ return 1.0; }]>,
    InterfaceMethod<[{
        Whether the operands that are partial sums must all be partial over the same axes, and
        whole operands cannot meet partial ones (add, sub: the ranks' sums would count a whole
        operand n times). Partitioning then reduces them to their common axes first.
      }],
      "bool", "partialOperandsMustAgree", (ins), [{}], [{ return false; }]>,
  ];
}

#endif
