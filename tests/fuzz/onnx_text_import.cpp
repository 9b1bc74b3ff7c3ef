//===- onnx_text_import.cpp - fuzz the importer through the ONNX text format ===//
#define CPC_FUZZ_ONNX_SUFFIX ".onnxtext"
#include "onnx_import.cpp"
