//===- TensorIO.cpp -------------------------------------------------------===//
#include "runtime/TensorIO.h"

#include "onnx/onnx_pb.h"

#include <cstring>
#include <fstream>
#include <regex>
#include <sstream>

namespace cpc {

namespace {
struct NpyType {
  const char *descr;
  DType dtype;
};
const NpyType kNpyTypes[] = {{"<f4", DType::F32}, {"<f8", DType::F64}, {"<f2", DType::F16}, {"<i8", DType::I64},
                             {"<i4", DType::I32}, {"<i2", DType::I16}, {"|i1", DType::I8}, {"|u1", DType::U8},
                             {"|b1", DType::I1}};

std::string readFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw RuntimeError(path + ": cannot open: " + std::strerror(errno));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

HostTensor readNpy(const std::string &path) {
  std::string bytes = readFile(path);
  auto fail = [&](const std::string &m) { return RuntimeError(path + ": " + m); };
  if (bytes.size() < 10 || bytes.compare(0, 6, "\x93NUMPY") != 0)
    throw fail("not a .npy file");
  int major = (unsigned char)bytes[6];
  size_t headerLen, start;
  if (major == 1) {
    headerLen = (unsigned char)bytes[8] | ((unsigned char)bytes[9] << 8);
    start = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12)
      throw fail("truncated .npy header");
    headerLen = 0;
    for (int i = 0; i < 4; ++i)
      headerLen |= (size_t)(unsigned char)bytes[8 + i] << (8 * i);
    start = 12;
  } else {
    throw fail("unsupported .npy version " + std::to_string(major));
  }
  if (start + headerLen > bytes.size())
    throw fail("truncated .npy header");
  std::string header = bytes.substr(start, headerLen);
  std::smatch m;
  if (!std::regex_search(header, m, std::regex("'descr':\\s*'([^']*)'")))
    throw fail("no dtype in the .npy header");
  HostTensor t;
  bool known = false;
  for (const auto &nt : kNpyTypes)
    if (m[1] == nt.descr) {
      t.dtype = nt.dtype;
      known = true;
    }
  if (!known)
    throw fail("unsupported .npy dtype '" + m[1].str() + "'");
  if (std::regex_search(header, std::regex("'fortran_order':\\s*True")))
    throw fail("Fortran-ordered arrays are not supported; save with np.ascontiguousarray");
  if (!std::regex_search(header, m, std::regex("'shape':\\s*\\(([^)]*)\\)")))
    throw fail("no shape in the .npy header");
  std::string dims = m[1];
  std::regex number("[0-9]+");
  for (auto it = std::sregex_iterator(dims.begin(), dims.end(), number); it != std::sregex_iterator(); ++it)
    t.shape.push_back(std::stoll(it->str()));
  size_t need = numElements(t.shape) * dtypeSize(t.dtype);
  size_t dataStart = start + headerLen;
  if (bytes.size() - dataStart != need)
    throw fail("holds " + std::to_string(bytes.size() - dataStart) + " data bytes, its header says " +
               std::to_string(need));
  t.data.assign(bytes.begin() + dataStart, bytes.end());
  return t;
}

DType dtypeOfOnnx(int type, const std::string &path) {
  switch (type) {
  case onnx::TensorProto_DataType_FLOAT: return DType::F32;
  case onnx::TensorProto_DataType_DOUBLE: return DType::F64;
  case onnx::TensorProto_DataType_FLOAT16: return DType::F16;
  case onnx::TensorProto_DataType_BFLOAT16: return DType::BF16;
  case onnx::TensorProto_DataType_INT64: return DType::I64;
  case onnx::TensorProto_DataType_INT32: return DType::I32;
  case onnx::TensorProto_DataType_INT16: return DType::I16;
  case onnx::TensorProto_DataType_INT8: return DType::I8;
  case onnx::TensorProto_DataType_UINT8: return DType::U8;
  case onnx::TensorProto_DataType_BOOL: return DType::I1;
  default: throw RuntimeError(path + ": unsupported tensor element type " + std::to_string(type));
  }
}

template <typename T, typename Src>
void copyTyped(HostTensor &t, const Src &values, int64_t n, const std::string &path) {
  if ((int64_t)values.size() != n)
    throw RuntimeError(path + ": holds " + std::to_string(values.size()) + " values, its dims say " +
                       std::to_string(n));
  t.data.resize(n * sizeof(T));
  for (int64_t i = 0; i < n; ++i) {
    T v = (T)values.Get(i);
    std::memcpy(t.data.data() + i * sizeof(T), &v, sizeof(T));
  }
}

HostTensor readPb(const std::string &path) {
  std::string bytes = readFile(path);
  onnx::TensorProto proto;
  if (!proto.ParseFromString(bytes))
    throw RuntimeError(path + ": not a valid ONNX TensorProto");
  HostTensor t;
  t.dtype = dtypeOfOnnx(proto.data_type(), path);
  t.shape.assign(proto.dims().begin(), proto.dims().end());
  int64_t n = numElements(t.shape);
  if (proto.has_raw_data()) {
    if ((int64_t)proto.raw_data().size() != n * (int64_t)dtypeSize(t.dtype))
      throw RuntimeError(path + ": raw data size does not match its dims");
    t.data.assign(proto.raw_data().begin(), proto.raw_data().end());
    return t;
  }
  switch (t.dtype) {
  case DType::F32: copyTyped<float>(t, proto.float_data(), n, path); break;
  case DType::F64: copyTyped<double>(t, proto.double_data(), n, path); break;
  case DType::I64: copyTyped<int64_t>(t, proto.int64_data(), n, path); break;
  case DType::I32: copyTyped<int32_t>(t, proto.int32_data(), n, path); break;
  case DType::I16: copyTyped<int16_t>(t, proto.int32_data(), n, path); break;
  case DType::I8: copyTyped<int8_t>(t, proto.int32_data(), n, path); break;
  case DType::U8: copyTyped<uint8_t>(t, proto.int32_data(), n, path); break;
  case DType::I1: copyTyped<uint8_t>(t, proto.int32_data(), n, path); break;
  case DType::F16: case DType::BF16: copyTyped<uint16_t>(t, proto.int32_data(), n, path); break;
  }
  return t;
}

bool endsWith(const std::string &s, const std::string &suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
} // namespace

HostTensor readTensorFile(const std::string &path) {
  if (endsWith(path, ".npy"))
    return readNpy(path);
  if (endsWith(path, ".pb"))
    return readPb(path);
  throw RuntimeError(path + ": unknown tensor file type (use .npy or an ONNX TensorProto .pb)");
}

void writeNpy(const std::string &path, const TensorRef &tensor) {
  const char *descr = nullptr;
  for (const auto &nt : kNpyTypes)
    if (nt.dtype == tensor.dtype)
      descr = nt.descr;
  if (!descr)
    throw RuntimeError(path + ": cannot write " + dtypeName(tensor.dtype) + " as .npy");
  std::string shape = "(";
  for (size_t i = 0; i < tensor.shape.size(); ++i)
    shape += std::to_string(tensor.shape[i]) + (tensor.shape.size() == 1 ? "," : (i + 1 < tensor.shape.size() ? ", " : ""));
  shape += ")";
  std::string header = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out)
    throw RuntimeError(path + ": cannot write: " + std::strerror(errno));
  out.write("\x93NUMPY\x01\x00", 8);
  uint16_t len = header.size();
  out.write(reinterpret_cast<const char *>(&len), 2);
  out.write(header.data(), header.size());
  out.write(static_cast<const char *>(tensor.data), tensor.bytes());
  if (!out.flush())
    throw RuntimeError(path + ": write failed");
}

} // namespace cpc
