//===- ModelLoader.h - read, check and shape-infer an ONNX model ----------===//
#ifndef CPC_FRONTENDS_ONNX_MODELLOADER_H
#define CPC_FRONTENDS_ONNX_MODELLOADER_H

#include "frontends/onnx/OnnxImporter.h"
#include "onnx/onnx_pb.h"

#include <memory>
#include <string>

namespace cpc::onnx_import {

/// Opsets of the default ONNX domain that the importer's handlers cover.
constexpr int kMinOpset = 13;
constexpr int kMaxOpset = 17;

struct LoadedModel {
  std::shared_ptr<onnx::ModelProto> proto;
  std::string path;     // as given by the user, for messages
  std::string modelDir; // where external data files are looked up
  int opset = 0;        // version of the default domain
};

/// Reads `path` (binary protobuf, or ONNX text for *.onnxtext) and checks the opset.
/// Throws ImportError with a one-line message naming the file.
LoadedModel parseModel(const std::string &path);

/// Checks that external data exists, validates the model with the ONNX checker and runs ONNX
/// shape inference. Throws ImportError.
void validateModel(LoadedModel &model);

/// Weight store over a loaded model: initializers read lazily, external data from disk.
std::shared_ptr<WeightStore> makeWeightStore(const LoadedModel &model);

/// Where an external-data initializer lives; throws ImportError when malformed.
struct ExternalLocation {
  std::string file;
  int64_t offset = 0;
  int64_t length = -1;
};
ExternalLocation externalLocation(const LoadedModel &model, const onnx::TensorProto &tensor);

} // namespace cpc::onnx_import

#endif
