//===- onnx_import.cpp - fuzz the ONNX loader and importer ----------------===//
//
// Bytes -> MODEL.onnx (binary protobuf) -> importOnnxFile, the path `cpc import` takes (parse,
// opset check, external data check, ONNX checker, shape inference, shape folding, node handlers,
// clean-up passes) -> the module must verify, and every parameter the IR names must be readable
// from the weight store with the size it reports. onnx_text_import.cpp runs the same on the ONNX
// text format (CPC_FUZZ_ONNX_SUFFIX).
//
#include "frontends/onnx/OnnxImporter.h"
#include "tests/fuzz/FuzzUtil.h"

#include "dialects/cpc/CpcDialect.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"

#include <vector>

#ifndef CPC_FUZZ_ONNX_SUFFIX
#define CPC_FUZZ_ONNX_SUFFIX ".onnx"
#endif

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const std::string path = cpc::fuzz::tempPath("model" CPC_FUZZ_ONNX_SUFFIX);
  cpc::fuzz::writeFile(path, data, size);
  mlir::MLIRContext context;
  context.disableMultithreading(); // as cpc import
  // Diagnostics are part of the importer's error path; keep them off the fuzzer's output.
  context.printOpOnDiagnostic(false);
  cpc::ImportedModel model;
  try {
    model = cpc::importOnnxFile(context, path);
  } catch (const std::runtime_error &) {
    return 0; // ImportError and friends: the model was rejected with a message
  }
  if (!model.module)
    cpc::fuzz::finding("importOnnxFile returned no module and threw nothing");
  if (mlir::failed(mlir::verify(*model.module)))
    cpc::fuzz::finding("importOnnxFile returned a module that does not verify");
  // The weights the IR refers to must be readable (initializers, or external data on disk).
  std::vector<uint8_t> buffer;
  model.module->walk([&](cpc::ParameterOp p) {
    std::string name = p.getName().str();
    if (!model.weights || !model.weights->contains(name))
      return; // parameters without stored values (e.g. zero-initialised) are allowed
    size_t bytes = model.weights->byteSize(name);
    if (bytes > (size_t(256) << 20))
      return;
    buffer.resize(bytes);
    try {
      model.weights->read(name, buffer.data());
    } catch (const std::runtime_error &) {
    }
  });
  return 0;
}
