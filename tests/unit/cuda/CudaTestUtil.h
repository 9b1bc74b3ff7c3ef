//===- CudaTestUtil.h - what the host tests of the CUDA kernels' arithmetic share ===//
//
// Host tensors of any element type, the kernels' 16-bit storage types as host stand-ins, values
// to feed them, and running the CPU kernel that a replayed CUDA kernel is compared with.
//
#ifndef CPC_TESTS_UNIT_CUDA_CUDATESTUTIL_H
#define CPC_TESTS_UNIT_CUDA_CUDATESTUTIL_H

#include "kernels/Float16.h"
#include "kernels/Kernel.h"
#include "tests/unit/TestUtil.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace cpc::cudatest {

using cpc::test::uniformValues;

/// A tensor of any element type on the host, its bytes 16-byte aligned (as device buffers are
/// at least, which the kernels' word widening depends on).
class HostTensor {
public:
  DType dtype;
  std::vector<int64_t> shape;

  HostTensor(DType t, std::vector<int64_t> s) : dtype(t), shape(std::move(s)) {
    words_.resize((numElements(shape) * dtypeSize(t) + 15) / 8 + 2, 0); // glibc's allocator: 16-aligned
  }
  int64_t numel() const { return numElements(shape); }
  /// Bytes.
  size_t size() const { return numel() * dtypeSize(dtype); }
  uint8_t *data() { return reinterpret_cast<uint8_t *>(words_.data()); }
  const uint8_t *data() const { return reinterpret_cast<const uint8_t *>(words_.data()); }
  template <class T> T *as() { return reinterpret_cast<T *>(data()); }
  TensorRef ref() { return TensorRef{data(), dtype, shape}; }
  bool operator==(const HostTensor &o) const {
    return size() == o.size() && std::memcmp(data(), o.data(), size()) == 0;
  }

  /// Element i as the storage type S (its bytes as they are).
  template <class S> S load(int64_t i) const {
    S s;
    std::memcpy(&s, data() + i * sizeof(S), sizeof(S));
    return s;
  }
  template <class S> void store(int64_t i, S s) { std::memcpy(data() + i * sizeof(S), &s, sizeof(S)); }

  /// Element i as a double (16-bit floats widened; integers exact in range).
  double value(int64_t i) const {
    const uint8_t *p = data();
    switch (dtype) {
    case DType::F32: return reinterpret_cast<const float *>(p)[i];
    case DType::F64: return reinterpret_cast<const double *>(p)[i];
    case DType::F16:
    case DType::BF16: return load16(dtype, reinterpret_cast<const uint16_t *>(p)[i]);
    case DType::I64: return double(reinterpret_cast<const int64_t *>(p)[i]);
    case DType::I32: return reinterpret_cast<const int32_t *>(p)[i];
    case DType::I16: return reinterpret_cast<const int16_t *>(p)[i];
    case DType::I8: return reinterpret_cast<const int8_t *>(p)[i];
    case DType::U8:
    case DType::I1: return p[i];
    }
    return 0;
  }
  /// Stores v converted as the CPU kernels' casts would: floats rounded once, integers
  /// truncated (through i64, so that narrow types wrap), i1 as v != 0.
  void setValue(int64_t i, double v) {
    uint8_t *p = data();
    switch (dtype) {
    case DType::F32: reinterpret_cast<float *>(p)[i] = float(v); break;
    case DType::F64: reinterpret_cast<double *>(p)[i] = v; break;
    case DType::F16:
    case DType::BF16: reinterpret_cast<uint16_t *>(p)[i] = store16(dtype, float(v)); break;
    case DType::I64: reinterpret_cast<int64_t *>(p)[i] = int64_t(v); break;
    case DType::I32: reinterpret_cast<int32_t *>(p)[i] = int32_t(int64_t(v)); break;
    case DType::I16: reinterpret_cast<int16_t *>(p)[i] = int16_t(int64_t(v)); break;
    case DType::I8: reinterpret_cast<int8_t *>(p)[i] = int8_t(int64_t(v)); break;
    case DType::U8: p[i] = uint8_t(int64_t(v)); break;
    case DType::I1: p[i] = v != 0; break;
    }
  }

private:
  std::vector<uint64_t> words_;
};

/// Host stand-ins for the kernels' 16-bit float storage types.
struct Half {
  uint16_t bits;
};
struct BFloat {
  uint16_t bits;
};

/// A storage type's compute type C, and the kernels' load (S -> C) and store (C -> S, one
/// rounding): 16-bit floats compute in f32, everything else in itself.
template <class S> struct HostStorage {
  using C = S;
  static C load(S s) { return s; }
  static S store(C c) { return c; }
};
template <> struct HostStorage<Half> {
  using C = float;
  static float load(Half h) { return halfToFloat(h.bits); }
  static Half store(float f) { return {floatToHalf(f)}; }
};
template <> struct HostStorage<BFloat> {
  using C = float;
  static float load(BFloat h) { return bf16ToFloat(h.bits); }
  static BFloat store(float f) { return {floatToBF16(f)}; }
};

/// Runs the CPU kernel of ctx.op on `ctx`, looked up by the step's element type as the executor
/// does.
inline void runCpuKernel(kernels::KernelContext &ctx) {
  kernels::KernelFn fn = kernels::KernelRegistry::cpu().find(ctx.op, DeviceKind::Cpu, kernels::stepDType(ctx));
  ASSERT_TRUE(fn) << ctx.op;
  fn(ctx);
}

/// A step's context on host tensors (`outs` receive the results).
inline kernels::KernelContext hostContext(OpKind op, const std::vector<HostTensor *> &ins,
                                          const std::vector<HostTensor *> &outs, const nlohmann::json &attrs) {
  kernels::KernelContext ctx;
  ctx.op = op;
  for (HostTensor *t : ins)
    ctx.inputs.push_back(t->ref());
  for (HostTensor *t : outs)
    ctx.outputs.push_back(t->ref());
  ctx.setAttrs(attrs);
  return ctx;
}

/// Runs the CPU kernel of `op` on host tensors.
inline void runCpuKernel(OpKind op, const std::vector<HostTensor *> &ins,
                         const std::vector<HostTensor *> &outs,
                         const nlohmann::json &attrs = nlohmann::json::object()) {
  kernels::KernelContext ctx = hostContext(op, ins, outs, attrs);
  runCpuKernel(ctx);
}

} // namespace cpc::cudatest

#endif
