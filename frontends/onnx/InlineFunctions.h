//===- InlineFunctions.h - model-local ONNX functions expanded in place ---===//
//
// Exporters may write a model's pieces as model-local functions (ModelProto.functions: the
// torch.export-based exporter's onnxscript functions when not optimized, or a user's own). The
// importer handles ONNX ops only, so each call is replaced by the function's body first.
//
#ifndef CPC_FRONTENDS_ONNX_INLINEFUNCTIONS_H
#define CPC_FRONTENDS_ONNX_INLINEFUNCTIONS_H

#include "onnx/onnx_pb.h"

#include <string>

namespace cpc::onnx_import {

/// Replaces every node of `model`'s graph that calls one of its local functions by the
/// function's nodes (values renamed apart, attribute references bound to the call's
/// attributes), repeatedly for calls inside functions, then drops the functions. Throws
/// ImportError naming `path` and the function for what cannot be expanded (recursion, a body
/// with subgraphs, another version of the default opset than the model's).
void inlineLocalFunctions(onnx::ModelProto &model, const std::string &path);

} // namespace cpc::onnx_import

#endif
