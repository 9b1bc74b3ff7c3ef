//===- OpVersions.h - which version of an ONNX op a model's opset means ---===//
//
// The table is generated from the ONNX specification (OpVersions.inc), not taken from the linked
// ONNX library, whose opset ceiling (17 on Debian 12) is below what exporters write today.
//
#ifndef CPC_FRONTENDS_ONNX_OPVERSIONS_H
#define CPC_FRONTENDS_ONNX_OPVERSIONS_H

#include <string>

namespace cpc::onnx_import {

/// The newest opset of the default domain the importer reads.
constexpr int kNewestOpset = 21;

/// The version of default-domain op `opType` in effect at `opset` (its newest since_version not
/// above it); 0 when the op does not exist at that opset or is not an ONNX op.
int opVersionAt(const std::string &opType, int opset);

} // namespace cpc::onnx_import

#endif
