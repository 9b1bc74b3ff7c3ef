//===- TensorIO.cpp -------------------------------------------------------===//
#include "runtime/TensorIO.h"
#include "kernels/Float16.h"

#include "support/CheckedSize.h"

#include "onnx/onnx_pb.h"
#include <nlohmann/json.hpp>
#include <cstdio>

#include <cstring>
#include <fstream>
#include <cctype>
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

/// The header of a .npy file: a Python dict literal with exactly the keys 'descr' (a string),
/// 'fortran_order' (True/False) and 'shape' (a tuple of non-negative integers), as numpy writes
/// it. Parsed strictly: anything else is an error naming what is wrong.
class NpyHeaderParser {
public:
  explicit NpyHeaderParser(const std::string &text) : text_(text) {}

  void parse(std::string &descr, bool &fortranOrder, std::vector<int64_t> &shape) {
    bool haveDescr = false, haveOrder = false, haveShape = false;
    expect('{');
    while (!peek('}')) {
      std::string key = quoted();
      expect(':');
      if (key == "descr" && !haveDescr) {
        descr = quoted();
        haveDescr = true;
      } else if (key == "fortran_order" && !haveOrder) {
        fortranOrder = boolean();
        haveOrder = true;
      } else if (key == "shape" && !haveShape) {
        shape = tuple();
        haveShape = true;
      } else {
        throw std::runtime_error("unexpected or repeated key '" + key + "'");
      }
      if (!peek('}'))
        expect(',');
    }
    expect('}');
    skipSpace();
    if (pos_ != text_.size())
      throw std::runtime_error("text after the dict");
    if (!haveDescr || !haveOrder || !haveShape)
      throw std::runtime_error(std::string("no '") + (!haveDescr ? "descr" : !haveOrder ? "fortran_order" : "shape") +
                               "' key");
  }

private:
  void skipSpace() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\n' || text_[pos_] == '\t'))
      ++pos_;
  }
  bool peek(char c) {
    skipSpace();
    return pos_ < text_.size() && text_[pos_] == c;
  }
  void expect(char c) {
    if (!peek(c))
      throw std::runtime_error(std::string("expected '") + c + "' at offset " + std::to_string(pos_));
    ++pos_;
  }
  std::string quoted() {
    skipSpace();
    char q = pos_ < text_.size() ? text_[pos_] : 0;
    if (q != '\'' && q != '"')
      throw std::runtime_error("expected a quoted string at offset " + std::to_string(pos_));
    size_t close = text_.find(q, pos_ + 1);
    if (close == std::string::npos)
      throw std::runtime_error("unterminated string");
    std::string value = text_.substr(pos_ + 1, close - pos_ - 1);
    pos_ = close + 1;
    return value;
  }
  bool boolean() {
    skipSpace();
    for (auto [word, value] : {std::pair<const char *, bool>{"True", true}, {"False", false}})
      if (text_.compare(pos_, std::strlen(word), word) == 0) {
        pos_ += std::strlen(word);
        return value;
      }
    throw std::runtime_error("expected True or False at offset " + std::to_string(pos_));
  }
  /// "()", "(N,)", "(N, M)" or "(N, M,)": non-negative decimal integers that fit int64.
  std::vector<int64_t> tuple() {
    std::vector<int64_t> dims;
    expect('(');
    while (!peek(')')) {
      size_t begin = pos_;
      int64_t value = 0;
      while (pos_ < text_.size() && std::isdigit((unsigned char)text_[pos_])) {
        auto next = checkedMul(value, 10);
        next = next ? checkedAdd(*next, text_[pos_] - '0') : next;
        if (!next)
          throw std::runtime_error("shape dim " + text_.substr(begin, pos_ + 1 - begin) + "... overflows 64 bits");
        value = *next;
        ++pos_;
      }
      if (pos_ == begin)
        throw std::runtime_error("shape dims must be non-negative integers (offset " + std::to_string(pos_) + ")");
      dims.push_back(value);
      if (!peek(')'))
        expect(',');
    }
    expect(')');
    return dims;
  }

  const std::string &text_;
  size_t pos_ = 0;
};

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
  if (headerLen > bytes.size() - start)
    throw fail("truncated .npy header: it says " + std::to_string(headerLen) + " bytes, the file has " +
               std::to_string(bytes.size() - start) + " after the preamble");
  std::string header = bytes.substr(start, headerLen), descr;
  bool fortranOrder = false;
  HostTensor t;
  try {
    NpyHeaderParser(header).parse(descr, fortranOrder, t.shape);
  } catch (const std::runtime_error &e) {
    throw fail(std::string("malformed .npy header: ") + e.what());
  }
  bool known = false;
  for (const auto &nt : kNpyTypes)
    if (descr == nt.descr) {
      t.dtype = nt.dtype;
      known = true;
    }
  if (!known)
    throw fail("unsupported .npy dtype '" + descr + "'");
  if (fortranOrder)
    throw fail("Fortran-ordered arrays are not supported; save with np.ascontiguousarray");
  auto need = checkedTensorBytes(t.shape, dtypeSize(t.dtype));
  if (!need)
    throw fail(tensorSizeProblem(t.shape, dtypeSize(t.dtype)));
  size_t dataStart = start + headerLen;
  if (bytes.size() - dataStart != (uint64_t)*need)
    throw fail("holds " + std::to_string(bytes.size() - dataStart) + " data bytes, its header's shape " +
               shapeString(t.shape) + " of " + descr + " needs " + std::to_string(*need));
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
  if (!checkedTensorBytes(t.shape, dtypeSize(t.dtype)))
    throw RuntimeError(path + ": " + tensorSizeProblem(t.shape, dtypeSize(t.dtype)));
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

void writeNpy(const std::string &path, const TensorRef &input) {
  // numpy has no bfloat16: a bf16 tensor is written as the f32 values it holds (exactly).
  std::vector<float> widened;
  TensorRef tensor = input;
  if (input.dtype == DType::BF16) {
    widened.resize(input.numel());
    widenToFloat(DType::BF16, input.data, widened.data(), input.numel());
    tensor.data = widened.data();
    tensor.dtype = DType::F32;
  }
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

namespace {
/// safetensors' name of a dtype.
const char *safetensorsDType(DType type) {
  switch (type) {
  case DType::F32: return "F32";
  case DType::F64: return "F64";
  case DType::F16: return "F16";
  case DType::BF16: return "BF16";
  case DType::I64: return "I64";
  case DType::I32: return "I32";
  case DType::I16: return "I16";
  case DType::I8: return "I8";
  case DType::U8: return "U8";
  case DType::I1: return "BOOL";
  }
  return "F32";
}
} // namespace

void writeSafetensors(const std::string &path, const std::vector<std::pair<std::string, HostTensor>> &tensors,
                      const std::vector<std::pair<std::string, std::string>> &metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    header["__metadata__"] = nlohmann::ordered_json::object();
    for (const auto &[key, value] : metadata)
      header["__metadata__"][key] = value;
  }
  size_t offset = 0;
  for (const auto &[name, t] : tensors) {
    if (header.contains(name))
      throw RuntimeError(path + ": tensor '" + name + "' given twice");
    header[name] = {{"dtype", safetensorsDType(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.data.size()}}};
    offset += t.data.size();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' '); // the data starts 8-byte aligned
  std::string temporary = path + ".tmp";
  std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
  uint64_t length = text.size(); // little-endian, as this machine
  out.write(reinterpret_cast<const char *>(&length), sizeof length);
  out.write(text.data(), text.size());
  for (const auto &[name, t] : tensors)
    out.write(reinterpret_cast<const char *>(t.data.data()), t.data.size());
  out.close();
  if (!out || std::rename(temporary.c_str(), path.c_str()) != 0) {
    std::remove(temporary.c_str());
    throw RuntimeError(path + ": cannot write the safetensors file");
  }
}

} // namespace cpc
