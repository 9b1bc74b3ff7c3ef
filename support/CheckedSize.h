//===- CheckedSize.h - element counts, byte sizes and offsets that cannot overflow ===//
//
// Every size cpc derives from user input (ONNX dims, --input-shape, plan metadata, tensor file
// headers) goes through these helpers. One limit, kMaxTensorBytes, bounds each tensor, so that
// sums of tensors, aligned offsets and byte counts in the compiler, the plan and the runtime stay
// far inside int64 once every tensor has been checked against it. Header-only: the dialect, the
// importer, the compiler and the runtime all use it.
//
#ifndef CPC_SUPPORT_CHECKEDSIZE_H
#define CPC_SUPPORT_CHECKEDSIZE_H

#include <cstdint>
#include <optional>
#include <string>

namespace cpc {

/// The largest tensor cpc plans: 2^48 bytes (256 TiB). Far above any tensor a machine holds, and
/// 2^15 times below int64's range, so that adding up tensors cannot overflow.
inline constexpr int64_t kMaxTensorBytesLog2 = 48;
inline constexpr int64_t kMaxTensorBytes = int64_t(1) << kMaxTensorBytesLog2;

/// a * b, or nullopt when it overflows int64.
inline std::optional<int64_t> checkedMul(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r))
    return std::nullopt;
  return r;
}

/// a + b, or nullopt when it overflows int64.
inline std::optional<int64_t> checkedAdd(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r))
    return std::nullopt;
  return r;
}

/// The product of `dims` (any range of integers), or nullopt when a dim is negative or the
/// product overflows int64.
template <typename Range> std::optional<int64_t> checkedNumElements(const Range &dims) {
  int64_t n = 1;
  for (auto d : dims) {
    if (d < 0)
      return std::nullopt;
    auto next = checkedMul(n, (int64_t)d);
    if (!next)
      return std::nullopt;
    n = *next;
  }
  return n;
}

/// Bytes of a tensor of `dims` with `elementBytes`-byte elements, or nullopt when a dim is
/// negative or the size is above kMaxTensorBytes.
template <typename Range>
std::optional<int64_t> checkedTensorBytes(const Range &dims, int64_t elementBytes) {
  auto n = checkedNumElements(dims);
  if (!n)
    return std::nullopt;
  auto bytes = checkedMul(*n, elementBytes);
  if (!bytes || *bytes > kMaxTensorBytes)
    return std::nullopt;
  return bytes;
}

/// "[2147483648, 2147483648]": dims as the user wrote them, for messages.
template <typename Range> std::string dimsToString(const Range &dims) {
  std::string s = "[";
  bool first = true;
  for (auto d : dims) {
    s += (first ? "" : ", ") + std::to_string((int64_t)d);
    first = false;
  }
  return s + "]";
}

/// Why checkedTensorBytes refused `dims`: one phrase for a message that names the tensor.
template <typename Range> std::string tensorSizeProblem(const Range &dims, int64_t elementBytes) {
  for (auto d : dims)
    if (d < 0)
      return "shape " + dimsToString(dims) + " has a negative dim";
  return "shape " + dimsToString(dims) + " of " + std::to_string(elementBytes) +
         "-byte elements is larger than the largest tensor cpc supports (2^" +
         std::to_string(kMaxTensorBytesLog2) + " bytes)";
}

} // namespace cpc

#endif
