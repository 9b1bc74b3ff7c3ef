//===- GpuTestUtil.h - running a CUDA kernel against its CPU twin ----------===//
//
// The `gpu` tests (ctest label gpu) need a CUDA GPU: without one every test is skipped, with
// the reason (GTEST_SKIP), and ctest reports them as skipped. `compareWithCpu` runs the CPU
// kernel and the CUDA kernel of an op on the same inputs and checks every output.
//
#ifndef CPC_TESTS_GPU_GPUTESTUTIL_H
#define CPC_TESTS_GPU_GPUTESTUTIL_H

#include "kernels/Float16.h"
#include "kernels/cpu/Kernel.h"
#include "runtime/Device.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace cpc::gputest {

/// The GPU of the tests (ordinal 0), or null with `why` set when there is none.
inline Device *gpu(std::string *why) {
  static std::string reason;
  static std::unique_ptr<Device> device = [] {
    std::unique_ptr<Device> d;
    if (!cudaBackendBuilt()) {
      reason = "cpc was built without CUDA";
      return d;
    }
    if (cudaDeviceCount(&reason) == 0)
      return d;
    d = makeCudaDevice(0);
    return d;
  }();
  *why = reason;
  return device.get();
}

/// Declares `Device *var` (the GPU), or skips the test with the reason when there is none:
/// `CPC_REQUIRE_GPU(device);`
#define CPC_REQUIRE_GPU(var)                                                                                 \
  std::string var##Why;                                                                                      \
  ::cpc::Device *var = ::cpc::gputest::gpu(&var##Why);                                                       \
  if (!var)                                                                                                  \
  GTEST_SKIP() << "no CUDA GPU: " << var##Why

/// A host tensor: shape, type and bytes.
struct Tensor {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
  Tensor() = default;
  Tensor(DType t, std::vector<int64_t> s) : dtype(t), shape(std::move(s)), bytes(numElements(shape) * dtypeSize(t)) {}
  TensorRef ref() { return TensorRef{bytes.data(), dtype, shape}; }
  template <typename T> T *as() { return reinterpret_cast<T *>(bytes.data()); }
};

/// f32 tensor of `shape` with deterministic values in [lo, hi).
inline Tensor randomF32(std::vector<int64_t> shape, uint64_t seed, float lo = -1, float hi = 1) {
  Tensor t(DType::F32, std::move(shape));
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (int64_t i = 0; i < numElements(t.shape); ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    t.as<float>()[i] = lo + (hi - lo) * (float)((x >> 11) * 0x1.0p-53);
  }
  return t;
}

/// `f32` (an f32 tensor) stored as element type `t`: truncated toward zero for integers (through
/// i64, so that values beyond a narrow type wrap), > 0 for i1, rounded once for 16-bit floats.
inline Tensor convertF32(const Tensor &f32, DType t) {
  Tensor out(t, f32.shape);
  const float *src = reinterpret_cast<const float *>(f32.bytes.data());
  for (int64_t i = 0; i < numElements(f32.shape); ++i) {
    float v = src[i];
    switch (t) {
    case DType::F32: out.as<float>()[i] = v; break;
    case DType::F64: out.as<double>()[i] = v; break;
    case DType::F16:
    case DType::BF16: out.as<uint16_t>()[i] = store16(t, v); break;
    case DType::I64: out.as<int64_t>()[i] = (int64_t)v; break;
    case DType::I32: out.as<int32_t>()[i] = (int32_t)(int64_t)v; break;
    case DType::I16: out.as<int16_t>()[i] = (int16_t)(int64_t)v; break;
    case DType::I8: out.as<int8_t>()[i] = (int8_t)(int64_t)v; break;
    case DType::U8: out.as<uint8_t>()[i] = (uint8_t)(int64_t)v; break;
    case DType::I1: out.as<uint8_t>()[i] = v > 0; break;
    }
  }
  return out;
}

/// A tensor of type `t` with deterministic values in [lo, hi), converted as convertF32 does.
inline Tensor filled(DType t, std::vector<int64_t> shape, uint64_t seed, float lo = -1, float hi = 1) {
  return convertF32(randomF32(std::move(shape), seed, lo, hi), t);
}

constexpr DType kFloatTypes[] = {DType::F32, DType::F64, DType::F16, DType::BF16};
constexpr DType kEveryType[] = {DType::F32, DType::F64, DType::F16, DType::BF16, DType::I64,
                                DType::I32, DType::I16, DType::I8,  DType::U8,   DType::I1};

/// Every element of `bytes` (of element type `t`) as a double.
inline std::vector<double> toDoubles(DType t, const std::vector<uint8_t> &bytes) {
  size_t n = bytes.size() / dtypeSize(t);
  std::vector<double> out(n);
  const uint8_t *p = bytes.data();
  for (size_t i = 0; i < n; ++i) {
    switch (t) {
    case DType::F32: out[i] = reinterpret_cast<const float *>(p)[i]; break;
    case DType::F64: out[i] = reinterpret_cast<const double *>(p)[i]; break;
    case DType::F16:
    case DType::BF16: out[i] = load16(t, reinterpret_cast<const uint16_t *>(p)[i]); break;
    case DType::I64: out[i] = (double)reinterpret_cast<const int64_t *>(p)[i]; break;
    case DType::I32: out[i] = reinterpret_cast<const int32_t *>(p)[i]; break;
    case DType::I16: out[i] = reinterpret_cast<const int16_t *>(p)[i]; break;
    case DType::I8: out[i] = reinterpret_cast<const int8_t *>(p)[i]; break;
    case DType::U8:
    case DType::I1: out[i] = p[i]; break;
    }
  }
  return out;
}

/// What a test adds to a step's context beyond its operands and attributes (a mesh rank, ...).
using ContextSetup = std::function<void(kernels::KernelContext &)>;

/// Runs the kernel of `op` for `device` (null: the CPU's) on `inputs`, with `outputs` as the
/// results' initial contents; returns the results. On a GPU the tensors are copied to device
/// memory and back.
inline std::vector<Tensor> runKernel(Device *device, OpKind op, std::vector<Tensor> inputs,
                                     std::vector<Tensor> outputs, const nlohmann::json &attrs,
                                     const ContextSetup &setup = nullptr) {
  kernels::KernelContext ctx;
  ctx.op = op;
  ctx.setAttrs(attrs);
  if (setup)
    setup(ctx);
  std::vector<void *> owned;
  auto place = [&](Tensor &t) {
    if (!device)
      return t.ref();
    void *p = device->allocator(MemorySpace::Device).allocate(t.bytes.size());
    owned.push_back(p);
    device->copy(p, MemorySpace::Device, t.bytes.data(), MemorySpace::Host, t.bytes.size());
    return TensorRef{p, t.dtype, t.shape};
  };
  ctx.device = device;
  for (Tensor &t : inputs)
    ctx.inputs.push_back(place(t));
  for (Tensor &t : outputs)
    ctx.outputs.push_back(place(t));
  DeviceKind kind = device ? DeviceKind::Cuda : DeviceKind::Cpu;
  kernels::KernelFn fn = kernelRegistry().find(op, kind, kernels::stepDType(ctx));
  EXPECT_TRUE(fn) << "no " << deviceKindName(kind) << " kernel for " << op << " on "
                  << dtypeName(kernels::stepDType(ctx));
  if (fn)
    fn(ctx);
  if (device) {
    device->synchronize();
    for (size_t o = 0; o < outputs.size(); ++o)
      device->copy(outputs[o].bytes.data(), MemorySpace::Host, ctx.outputs[o].data, MemorySpace::Device,
                   outputs[o].bytes.size());
    for (void *p : owned)
      device->allocator(MemorySpace::Device).deallocate(p);
  }
  return outputs;
}

/// What an element's relative tolerance is relative to: the element itself (elementwise ops),
/// or at least the output's root mean square (ops that sum many products: a matmul or
/// convolution output that cancels to near 0 carries the rounding of its terms, not of itself).
enum class ToleranceScale { Element, OutputRms };

/// Runs `op` on the CPU and on `device` with the same inputs; every output element must agree
/// within `rtol` relative (and `atol` absolute) difference, or be equal (infinities, of the same
/// sign), or both be NaN; integer and bool outputs exactly.
inline void compareWithCpu(Device *device, OpKind op, std::vector<Tensor> inputs,
                           std::vector<Tensor> outputs, const nlohmann::json &attrs = nlohmann::json::object(),
                           double rtol = 1e-5, double atol = 1e-6,
                           ToleranceScale scale = ToleranceScale::Element) {
  std::vector<Tensor> cpu = runKernel(nullptr, op, inputs, outputs, attrs);
  std::vector<Tensor> gpu = runKernel(device, op, inputs, outputs, attrs);
  for (size_t o = 0; o < outputs.size(); ++o) {
    DType t = outputs[o].dtype;
    std::vector<double> w = toDoubles(t, cpu[o].bytes), h = toDoubles(t, gpu[o].bytes);
    double floor = 0;
    if (scale == ToleranceScale::OutputRms && !w.empty()) {
      for (double v : w)
        floor += std::isfinite(v) ? v * v : 0;
      floor = std::sqrt(floor / double(w.size()));
    }
    int64_t bad = 0;
    for (size_t i = 0; i < w.size(); ++i) {
      bool ok = w[i] == h[i] ||
                (isFloatDType(t) && (std::fabs(w[i] - h[i]) <= atol + rtol * std::max(std::fabs(w[i]), floor) ||
                                     (std::isnan(w[i]) && std::isnan(h[i]))));
      if (!ok && bad++ < 5)
        ADD_FAILURE() << op << " output " << o << " element " << i << ": cpu " << w[i] << ", gpu " << h[i];
    }
    EXPECT_EQ(bad, 0) << op << " output " << o << ": " << bad << " of " << w.size() << " elements differ";
  }
}

} // namespace cpc::gputest

#endif
