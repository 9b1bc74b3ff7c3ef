//===- CpcEnums.h - the cpc enums (roles, phases, reduction kinds) --------===//
#ifndef CPC_DIALECTS_CPC_CPCENUMS_H
#define CPC_DIALECTS_CPC_CPCENUMS_H

#include "mlir/IR/OpImplementation.h"

#include "dialects/cpc/CpcEnums.h.inc"

#endif
