//===- ModelLoader.h - read, check and shape-infer an ONNX model ----------===//
#ifndef CPC_FRONTENDS_ONNX_MODELLOADER_H
#define CPC_FRONTENDS_ONNX_MODELLOADER_H

#include "frontends/onnx/OnnxImporter.h"
#include "frontends/onnx/OpVersions.h"
#include "onnx/onnx_pb.h"

#include <memory>
#include <string>
#include <vector>
#include <unordered_map>

namespace cpc::onnx_import {

/// Opsets of the default ONNX domain that the importer reads (the newest: OpVersions.h).
constexpr int kMinOpset = 13;

/// What an initializer was in the exported program, when the exporter recorded it (torch.export's
/// graph signature, which the current torch.onnx exporter writes as value metadata).
enum class SourceRole { Parameter, Buffer, Constant };

struct LoadedModel {
  std::shared_ptr<onnx::ModelProto> proto;
  /// Filled when the model carries a torch.export signature; an initializer missing from it is
  /// a constant the exporter made (a scalar, a folded mask), not something to train.
  std::unordered_map<std::string, SourceRole> sourceRoles;
  std::string path;     // as given by the user, for messages
  std::string modelDir; // where external data files are looked up
  int opset = 0;        // version of the default domain
};

/// Reads `path` (binary protobuf, or ONNX text for *.onnxtext) and checks the opset.
/// Throws ImportError with a one-line message naming the file.
LoadedModel parseModel(const std::string &path);

/// Checks that external data exists, validates the model with the ONNX checker and runs ONNX
/// shape inference. Above the linked library's opset ceiling, the library checks the
/// initializers and each node whose op is unchanged since that ceiling (as its older version);
/// the importer's handlers and shape rules check the rest. Throws ImportError.
void validateModel(LoadedModel &model);

/// metadata_props of ValueInfoProto and NodeProto (IR version 10) are newer than the linked
/// library's protobuf schema, which keeps them as unknown fields with these numbers.
constexpr int kValueInfoMetadataField = 4;
constexpr int kNodeMetadataField = 9;
std::vector<onnx::StringStringEntryProto> newerMetadata(const google::protobuf::Message &message, int field);
/// The value of `key` among them; empty when absent.
std::string newerMetadataValue(const google::protobuf::Message &message, int field, const std::string &key);

/// "node 'NAME' (OP)" for messages; '#index' when the node has no name.
std::string describeNode(const onnx::NodeProto &node, int index);

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
