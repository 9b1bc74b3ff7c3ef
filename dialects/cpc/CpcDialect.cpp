//===- CpcDialect.cpp - dialect and attribute definitions -----------------===//
#include "dialects/cpc/CpcDialect.h"

#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace cpc;

#include "dialects/cpc/CpcDialect.cpp.inc"
#include "dialects/cpc/CpcInterfaces.cpp.inc"

#include "dialects/cpc/CpcEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/cpc/CpcAttrs.cpp.inc"

void CpcDialect::initialize() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "dialects/cpc/CpcAttrs.cpp.inc"
      >();
  addOperations<
#define GET_OP_LIST
#include "dialects/cpc/CpcOps.cpp.inc"
      >();
}

Operation *CpcDialect::materializeConstant(OpBuilder &builder, Attribute value, Type type,
                                           Location loc) {
  auto elements = llvm::dyn_cast<ElementsAttr>(value);
  if (!elements || elements.getType() != type)
    return nullptr;
  return builder.create<ConstantOp>(loc, elements);
}

//===----------------------------------------------------------------------===//
// ShardingAttr
//===----------------------------------------------------------------------===//

/// Appends the axis names of `list` (an array of strings) to `out`; false if malformed.
static bool collectAxisNames(ArrayAttr list, SmallVectorImpl<StringRef> &out) {
  for (Attribute a : list) {
    auto name = llvm::dyn_cast<StringAttr>(a);
    if (!name || name.getValue().empty())
      return false;
    out.push_back(name.getValue());
  }
  return true;
}

LogicalResult ShardingAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                   FlatSymbolRefAttr mesh, ArrayAttr dimAxes,
                                   ArrayAttr partialAxes) {
  llvm::StringSet<> seen;
  auto record = [&](ArrayAttr list, StringRef what) -> LogicalResult {
    SmallVector<StringRef> names;
    if (!collectAxisNames(list, names))
      return emitError() << what << " must be lists of non-empty mesh axis names";
    for (StringRef n : names)
      if (!seen.insert(n).second)
        return emitError() << "mesh axis '" << n << "' is used more than once";
    return success();
  };
  for (Attribute dim : dimAxes) {
    auto list = llvm::dyn_cast<ArrayAttr>(dim);
    if (!list)
      return emitError() << "each tensor dim needs a list of mesh axes (use [] to replicate)";
    if (failed(record(list, "dim axes")))
      return failure();
  }
  if (partialAxes && failed(record(partialAxes, "partial axes")))
    return failure();
  return success();
}

SmallVector<StringRef> ShardingAttr::getAxesOfDim(unsigned dim) const {
  SmallVector<StringRef> names;
  if (dim < getDimAxes().size())
    collectAxisNames(llvm::cast<ArrayAttr>(getDimAxes()[dim]), names);
  return names;
}

SmallVector<StringRef> ShardingAttr::getPartialAxisNames() const {
  SmallVector<StringRef> names;
  if (getPartialAxes())
    collectAxisNames(getPartialAxes(), names);
  return names;
}
