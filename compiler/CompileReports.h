//===- CompileReports.h - what cpc compile prints about a plan -------------===//
#ifndef CPC_COMPILER_COMPILEREPORTS_H
#define CPC_COMPILER_COMPILEREPORTS_H

#include "runtime/PipelineSchedule.h"

#include "mlir/IR/BuiltinOps.h"

#include <ostream>
#include <string>
#include <vector>

namespace cpc {

/// --dump-sharding: every input, variable and op result of `functions` that is split or partial,
/// with its global shape, sharding and local shape; with `variablesOnly` (cpc plan --explain) the
/// inputs, the search's summaries and the variables, not every op.
void printShardingTable(mlir::ModuleOp module, const std::vector<std::string> &functions, std::ostream &out,
                        bool variablesOnly = false);

/// The stage table of a pipeline: per chunk its pipeline rank, ops, estimated FLOPs, parameter
/// and boundary bytes.
void printStageTable(mlir::ModuleOp module, const PipelineSchedule &schedule, std::ostream &out);

} // namespace cpc

#endif
