//===- TensorIO.h - tensors from and to files (.npy, ONNX TensorProto .pb) -===//
#ifndef CPC_RUNTIME_TENSORIO_H
#define CPC_RUNTIME_TENSORIO_H

#include "kernels/Tensor.h"

#include <string>
#include <vector>

namespace cpc {

/// A tensor that owns its bytes.
struct HostTensor {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;

  TensorRef ref() { return TensorRef{data.data(), dtype, shape}; }
};

/// Reads FILE.npy (numpy format 1.0-3.0, C order) or FILE.pb (an ONNX TensorProto, as in the ONNX
/// test data). Throws RuntimeError naming the file.
HostTensor readTensorFile(const std::string &path);

/// Writes `tensor` as a .npy file. Throws RuntimeError.
void writeNpy(const std::string &path, const TensorRef &tensor);

/// Writes named tensors as a safetensors file (Hugging Face's format: an 8-byte header length, a
/// JSON header of names, dtypes, shapes and byte ranges, then the data in that order), which
/// `safetensors.torch.load_file` reads into a state dict. `metadata` becomes its string map.
/// Written beside `path` and renamed over it. Throws RuntimeError naming the file.
void writeSafetensors(const std::string &path, const std::vector<std::pair<std::string, HostTensor>> &tensors,
                      const std::vector<std::pair<std::string, std::string>> &metadata = {});

} // namespace cpc

#endif
