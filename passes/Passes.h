//===- Passes.h - cpc passes ----------------------------------------------===//
#ifndef CPC_PASSES_PASSES_H
#define CPC_PASSES_PASSES_H

#include "dialects/cpc/CpcDialect.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace cpc {
#define GEN_PASS_DECL
#include "passes/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/Passes.h.inc"

/// Adds the import clean-up pipeline that `cpc import` runs: fusions, then canonicalization.
void addImportCleanupPasses(mlir::OpPassManager &pm);
} // namespace cpc

#endif
