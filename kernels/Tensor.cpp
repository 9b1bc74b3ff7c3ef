//===- Tensor.cpp ---------------------------------------------------------===//
#include "kernels/Tensor.h"
#include "support/CheckedSize.h"

namespace cpc {

size_t dtypeSize(DType type) {
  switch (type) {
  case DType::F32: case DType::I32: return 4;
  case DType::F64: case DType::I64: return 8;
  case DType::F16: case DType::BF16: case DType::I16: return 2;
  case DType::I8: case DType::U8: case DType::I1: return 1;
  }
  return 0;
}

const char *dtypeName(DType type) {
  switch (type) {
  case DType::F32: return "f32";
  case DType::F64: return "f64";
  case DType::F16: return "f16";
  case DType::BF16: return "bf16";
  case DType::I64: return "i64";
  case DType::I32: return "i32";
  case DType::I16: return "i16";
  case DType::I8: return "i8";
  case DType::U8: return "ui8";
  case DType::I1: return "i1";
  }
  return "?";
}

std::optional<DType> parseDType(const std::string &name) {
  for (DType t : {DType::F32, DType::F64, DType::F16, DType::BF16, DType::I64, DType::I32, DType::I16,
                  DType::I8, DType::U8, DType::I1})
    if (name == dtypeName(t))
      return t;
  return std::nullopt;
}

bool isFloatDType(DType type) {
  return type == DType::F32 || type == DType::F64 || type == DType::F16 || type == DType::BF16;
}

const char *deviceKindName(DeviceKind kind) { return kind == DeviceKind::Cuda ? "cuda" : "cpu"; }

std::optional<DeviceKind> parseDeviceKind(const std::string &name) {
  if (name == "cpu")
    return DeviceKind::Cpu;
  if (name == "cuda")
    return DeviceKind::Cuda;
  return std::nullopt;
}

const char *memorySpaceName(MemorySpace space) { return space == MemorySpace::Device ? "device" : "host"; }

std::optional<MemorySpace> parseMemorySpace(const std::string &name) {
  if (name == "host")
    return MemorySpace::Host;
  if (name == "device")
    return MemorySpace::Device;
  return std::nullopt;
}

int64_t numElements(const std::vector<int64_t> &shape) {
  if (auto n = checkedNumElements(shape))
    return *n;
  throw RuntimeError("shape " + shapeString(shape) + " has a negative dim or more elements than 64 bits count");
}

std::string shapeString(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? "x" : "") + std::to_string(shape[i]);
  return s + "]";
}

} // namespace cpc
