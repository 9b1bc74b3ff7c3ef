//===- tensor_reader.cpp - fuzz readTensorFile (.npy and ONNX TensorProto .pb) ===//
//
// The first byte of the input picks the file name's extension (even: .npy, odd: .pb), the rest is
// the file, read with readTensorFile as `cpc-run --input NAME=FILE` reads it. A tensor that loads
// must be self-consistent: its bytes are numElements(shape) * dtypeSize(dtype); it is then
// written back as .npy (when .npy has its dtype) and read again, and must come back equal.
//
#include "kernels/Float16.h"
#include "runtime/TensorIO.h"
#include "tests/fuzz/FuzzUtil.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0)
    return 0;
  static const std::string npy = cpc::fuzz::tempPath("tensor.npy"), pb = cpc::fuzz::tempPath("tensor.pb"),
                           back = cpc::fuzz::tempPath("back.npy");
  const std::string &path = data[0] % 2 ? pb : npy;
  cpc::fuzz::writeFile(path, data + 1, size - 1);
  cpc::HostTensor t;
  try {
    t = cpc::readTensorFile(path);
  } catch (const std::runtime_error &) {
    return 0;
  }
  for (int64_t d : t.shape)
    if (d < 0)
      cpc::fuzz::finding("readTensorFile returned a negative dimension");
  if (t.data.size() != size_t(cpc::numElements(t.shape)) * cpc::dtypeSize(t.dtype))
    cpc::fuzz::finding("readTensorFile returned " + std::to_string(t.data.size()) + " bytes for its shape");
  try {
    cpc::writeNpy(back, t.ref());
  } catch (const std::runtime_error &) {
    return 0; // .npy has no such dtype (bf16, bool)
  }
  cpc::HostTensor again;
  try {
    again = cpc::readTensorFile(back);
  } catch (const std::runtime_error &e) {
    cpc::fuzz::finding(std::string("a tensor written with writeNpy does not read back: ") + e.what());
  }
  if (t.dtype == cpc::DType::BF16) { // .npy has no bf16: written as its exact f32 values
    std::vector<uint8_t> widened(t.data.size() * 2);
    cpc::widenToFloat(cpc::DType::BF16, t.data.data(), reinterpret_cast<float *>(widened.data()),
                      cpc::numElements(t.shape));
    if (again.dtype != cpc::DType::F32 || again.shape != t.shape || again.data != widened)
      cpc::fuzz::finding("a bf16 tensor written with writeNpy does not read back as its f32 values");
    return 0;
  }
  if (again.dtype != t.dtype || again.shape != t.shape || again.data != t.data)
    cpc::fuzz::finding("a tensor written with writeNpy reads back different");
  return 0;
}
