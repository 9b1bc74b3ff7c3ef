//===- Tensor.h - element types and tensor views shared by plans and kernels ===//
#ifndef CPC_KERNELS_TENSOR_H
#define CPC_KERNELS_TENSOR_H

#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace cpc {

/// Element types a plan can hold. The names are MLIR's spelling ("f32", "i64", "i1", ...).
enum class DType : uint8_t { F32, F64, F16, BF16, I64, I32, I16, I8, U8, I1 };

size_t dtypeSize(DType type);
const char *dtypeName(DType type);
std::optional<DType> parseDType(const std::string &name);
bool isFloatDType(DType type);

/// Where a plan runs and a kernel is built for ("cpu", "cuda").
enum class DeviceKind : uint8_t { Cpu, Cuda };
const char *deviceKindName(DeviceKind kind);
std::optional<DeviceKind> parseDeviceKind(const std::string &name);
/// Which memory a plan buffer lives in: the host's, or the device's (a GPU plan's tensors).
enum class MemorySpace : uint8_t { Host, Device };
const char *memorySpaceName(MemorySpace space);
std::optional<MemorySpace> parseMemorySpace(const std::string &name);

int64_t numElements(const std::vector<int64_t> &shape);
/// Element strides of a contiguous row-major tensor of `shape`.
inline std::vector<int64_t> rowMajorStrides(const std::vector<int64_t> &shape) {
  std::vector<int64_t> s(shape.size());
  for (int64_t i = (int64_t)shape.size() - 1, acc = 1; i >= 0; --i) {
    s[i] = acc;
    acc *= shape[i];
  }
  return s;
}
std::string shapeString(const std::vector<int64_t> &shape);

/// A typed view of memory owned elsewhere (the arena, a parameter, an input).
struct TensorRef {
  void *data = nullptr;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;

  int64_t numel() const { return numElements(shape); }
  int64_t rank() const { return (int64_t)shape.size(); }
  size_t bytes() const { return numel() * dtypeSize(dtype); }
  template <typename T> T *as() const { return static_cast<T *>(data); }
};

/// A kernel or plan error with a one-line message for the user.
struct RuntimeError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

} // namespace cpc

#endif
