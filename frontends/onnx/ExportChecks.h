//===- ExportChecks.h - exports that changed the model they were made from ===//
//
// An exporter that treats parameters as constants may fold and merge them: equal initializers
// become one tensor (every LayerNorm weight, at a fresh initialization), a tied head becomes a
// constant transposed copy of the embedding. Inference is unchanged; training is not (the merged
// weights train as one, the copy does not train). These checks find such cases from the model
// itself and the exporter's provenance metadata, and say what to re-export with.
//
#ifndef CPC_FRONTENDS_ONNX_EXPORTCHECKS_H
#define CPC_FRONTENDS_ONNX_EXPORTCHECKS_H

#include "frontends/onnx/ModelLoader.h"

#include <string>
#include <vector>

namespace cpc::onnx_import {

/// One line per case (without the file name), in node order.
std::vector<std::string> exportChangedModelWarnings(const LoadedModel &model, const WeightStore &weights);

} // namespace cpc::onnx_import

#endif
