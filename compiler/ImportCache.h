//===- ImportCache.h - one import of a model for many compiles ---------------===//
//
// `cpc plan` compiles every layout of one model; reading and converting the ONNX file is most
// of each compile on a large model (GPT 24 x 1024: 2.9 s of a 3.7 s compile). The cache keeps
// each import (per file and import options) as MLIR bytecode, parsed into each compile's own
// context, and shares the weight store, which is read-only.
//
#ifndef CPC_COMPILER_IMPORTCACHE_H
#define CPC_COMPILER_IMPORTCACHE_H

#include "frontends/onnx/OnnxImporter.h"

#include <mutex>
#include <string>
#include <vector>

namespace cpc {

class ImportCache {
public:
  /// `path` imported with `options` into `context`: from the cache when imported before with the
  /// same options, else imported (errors as importOnnxFile's) and kept.
  ImportedModel import(mlir::MLIRContext &context, const std::string &path, const ImportOptions &options);

private:
  struct Entry {
    std::string key, bytecode; // key: all options but batchStatisticGroups
    int64_t batchStatisticGroups = 1;
    bool dependsOnGroups = false;
    std::shared_ptr<WeightStore> weights;
    std::vector<std::string> warnings;
  };
  std::mutex mutex_;
  std::vector<Entry> entries_;
};

} // namespace cpc

#endif // CPC_COMPILER_IMPORTCACHE_H
