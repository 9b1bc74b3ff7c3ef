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

/// The optional tail of #cpc.sharding: `, partial = [...]`, `, reduction = max`,
/// `, priority = N`, each at most once, in this order.
static ParseResult parseShardingTail(AsmParser &parser, ArrayAttr &partial, ReductionKind &reduction,
                                     int64_t &priority) {
  partial = ArrayAttr();
  reduction = ReductionKind::Sum;
  priority = 0;
  int stage = 0;
  while (succeeded(parser.parseOptionalComma())) {
    StringRef key;
    SMLoc loc = parser.getCurrentLocation();
    if (parser.parseKeyword(&key) || parser.parseEqual())
      return failure();
    if (key == "partial" && stage < 1) {
      ArrayAttr axes;
      if (parser.parseAttribute(axes))
        return failure();
      partial = axes;
      stage = 1;
    } else if (key == "reduction" && stage < 2) {
      FailureOr<ReductionKind> kind = FieldParser<ReductionKind, ReductionKind>::parse(parser);
      if (failed(kind))
        return failure();
      reduction = *kind;
      stage = 2;
    } else if (key == "priority" && stage < 3) {
      int64_t value;
      if (parser.parseInteger(value))
        return failure();
      priority = value;
      stage = 3;
    } else {
      return parser.emitError(loc, "expected 'partial', 'reduction' or 'priority' (once each, in this order), got '")
             << key << "'";
    }
  }
  return success();
}

static void printShardingTail(AsmPrinter &printer, ArrayAttr partial, ReductionKind reduction, int64_t priority) {
  if (partial)
    printer << ", partial = " << partial;
  if (reduction != ReductionKind::Sum)
    printer << ", reduction = " << stringifyReductionKind(reduction);
  if (priority != 0)
    printer << ", priority = " << priority;
}

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
                                   ArrayAttr partialAxes, ReductionKind reduction, int64_t priority) {
  if (priority < 0)
    return emitError() << "priority must be >= 0, got " << priority;
  if (reduction != ReductionKind::Sum && (!partialAxes || partialAxes.empty()))
    return emitError() << "a reduction (" << stringifyReductionKind(reduction) << ") needs partial axes";
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
