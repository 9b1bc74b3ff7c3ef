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

int64_t numElements(const std::vector<int64_t> &shape);
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
