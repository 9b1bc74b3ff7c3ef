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

#include <cmath>
#include <cstring>
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

/// Runs `op` on the CPU and on `device` with the same inputs; every output element must agree
/// within `rtol` relative (and `atol` absolute) difference; integer and bool outputs exactly.
inline void compareWithCpu(Device *device, const std::string &op, std::vector<Tensor> inputs,
                           std::vector<Tensor> outputs, const nlohmann::json &attrs = nlohmann::json::object(),
                           double rtol = 1e-5, double atol = 1e-6) {
  const kernels::KernelRegistry &registry = kernelRegistry();
  // CPU.
  std::vector<Tensor> cpuOut = outputs;
  kernels::KernelContext cpu;
  cpu.op = op;
  for (Tensor &t : inputs)
    cpu.inputs.push_back(t.ref());
  for (Tensor &t : cpuOut)
    cpu.outputs.push_back(t.ref());
  cpu.setAttrs(attrs);
  kernels::KernelFn cpuFn = registry.find(op, DeviceKind::Cpu, kernels::stepDType(cpu));
  ASSERT_TRUE(cpuFn) << "no CPU kernel for " << op;
  cpuFn(cpu);
  // GPU: inputs and outputs copied to device memory.
  Allocator &memory = device->allocator(MemorySpace::Device);
  std::vector<void *> owned;
  auto upload = [&](Tensor &t) {
    void *p = memory.allocate(t.bytes.size());
    owned.push_back(p);
    device->copy(p, MemorySpace::Device, t.bytes.data(), MemorySpace::Host, t.bytes.size());
    return TensorRef{p, t.dtype, t.shape};
  };
  kernels::KernelContext gpu;
  gpu.op = op;
  gpu.device = device;
  for (Tensor &t : inputs)
    gpu.inputs.push_back(upload(t));
  for (Tensor &t : outputs)
    gpu.outputs.push_back(upload(t));
  gpu.setAttrs(attrs);
  kernels::KernelFn gpuFn = registry.find(op, DeviceKind::Cuda, kernels::stepDType(gpu));
  ASSERT_TRUE(gpuFn) << "no CUDA kernel for " << op << " on " << dtypeName(kernels::stepDType(gpu));
  gpuFn(gpu);
  device->synchronize();
  for (size_t o = 0; o < outputs.size(); ++o) {
    Tensor got = outputs[o];
    device->copy(got.bytes.data(), MemorySpace::Host, gpu.outputs[o].data, MemorySpace::Device, got.bytes.size());
    std::vector<double> w = toDoubles(got.dtype, cpuOut[o].bytes), h = toDoubles(got.dtype, got.bytes);
    int64_t bad = 0;
    for (size_t i = 0; i < w.size(); ++i) {
      bool ok = isFloatDType(got.dtype) ? std::fabs(w[i] - h[i]) <= atol + rtol * std::fabs(w[i]) ||
                                              (std::isnan(w[i]) && std::isnan(h[i]))
                                        : w[i] == h[i];
      if (!ok && bad++ < 5)
        ADD_FAILURE() << op << " output " << o << " element " << i << ": cpu " << w[i] << ", gpu " << h[i];
    }
    EXPECT_EQ(bad, 0) << op << " output " << o << ": " << bad << " of " << w.size() << " elements differ";
  }
  for (void *p : owned)
    memory.deallocate(p);
}

} // namespace cpc::gputest

#endif
