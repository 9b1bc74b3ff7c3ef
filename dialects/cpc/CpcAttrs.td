//===- CpcAttrs.td - cpc attributes ------------------------*- tablegen -*-===//
#ifndef CPC_ATTRS_TD
#define CPC_ATTRS_TD

include "dialects/cpc/CpcBase.td"

def Cpc_ShardingAttr : AttrDef<Cpc_Dialect, "Sharding"> {
  let mnemonic = "sharding";
  let summary = "How a tensor is laid out over a device mesh";
  let description = [{
    `dim_axes[i]` lists the mesh axes that split tensor dim `i` (major to minor; empty means
    replicated along that dim). `partial_axes` lists mesh axes over which each rank holds a
    partial sum of the value (e.g. gradients of replicated parameters under data parallelism).

    Example: `#cpc.sharding<@mesh, [["dp"], [], ["tp"]], partial = ["pp"]>`
  }];
  let parameters = (ins
    "::mlir::FlatSymbolRefAttr":$mesh,
    "::mlir::ArrayAttr":$dim_axes,
    OptionalParameter<"::mlir::ArrayAttr">:$partial_axes);
  let assemblyFormat = "`<` $mesh `,` $dim_axes (`,` `partial` `=` $partial_axes^)? `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// Mesh axes splitting dim `dim` (empty when replicated).
    ::llvm::SmallVector<::llvm::StringRef> getAxesOfDim(unsigned dim) const;
    /// Mesh axes over which the value is a partial sum.
    ::llvm::SmallVector<::llvm::StringRef> getPartialAxisNames() const;
  }];
}

#endif // CPC_ATTRS_TD
