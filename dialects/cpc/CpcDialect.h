//===- CpcDialect.h - the cpc dialect: dialect, attributes, ops -----------===//
#ifndef CPC_DIALECTS_CPC_CPCDIALECT_H
#define CPC_DIALECTS_CPC_CPCDIALECT_H

#include "dialects/cpc/Autocast.h"
#include "dialects/cpc/PlanTraits.h"
#include "dialects/cpc/Replayable.h"
#include "dialects/cpc/ShapeRules.h"
#include "dialects/cpc/TensorSizeLimit.h"
#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "dialects/cpc/CpcEnums.h"
#include "dialects/cpc/ShardingRules.h"

#include "dialects/cpc/CpcDialect.h.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/cpc/CpcAttrs.h.inc"

// After the attributes: ShardingRuleOpInterface::adaptToBlocks takes #cpc.sharding values.
#include "dialects/cpc/CpcInterfaces.h.inc"

#define GET_OP_CLASSES
#include "dialects/cpc/CpcOps.h.inc"

namespace cpc {
/// cpc.attention's probabilities for q and k: [..., N, M], or [..., H, N, M] for token-major
/// q [..., N, H, D] and k [..., M, H, D] (layout "bnhd").
mlir::RankedTensorType attentionProbabilitiesType(mlir::Value q, mlir::Value k, bool tokenMajor);
} // namespace cpc

#endif
