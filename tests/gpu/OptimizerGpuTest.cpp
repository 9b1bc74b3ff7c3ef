//===- OptimizerGpuTest.cpp - the training-state CUDA kernels against the CPU's ===//
//
// cpc.adamw (f32/f64 to about an ulp: the GPU's pow may differ from glibc's in the last bit of
// the bias corrections; 16-bit parameters through f32), cpc.random_uniform (bit for bit: the
// same counter-based generator), and the byte copies of assign, copy, reshape and
// stop_gradient on every element type.
//
#include "kernels/Float16.h"
#include "tests/gpu/GpuTestUtil.h"

#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

using namespace cpc;
using namespace cpc::gputest;

namespace {

Tensor scalarF32(float v) {
  Tensor t(DType::F32, {});
  t.as<float>()[0] = v;
  return t;
}

// Tests adamw on each float type, both forms of torch's lerp (1 - beta1 below and above 0.5),
// with and without weight decay, on the first step and a late one.
TEST(OptimizerGpu, AdamW) {
  CPC_REQUIRE_GPU(device);
  struct Setting {
    float lr, step;
    double beta1, beta2, eps, wd;
  };
  const Setting settings[] = {{1e-3f, 1, 0.9, 0.999, 1e-8, 0.01}, {3e-4f, 1000, 0.9, 0.95, 1e-6, 0},
                              {5e-3f, 7, 0.3, 0.99, 1e-5, 0.1}};
  const std::vector<int64_t> shape = {257, 1031};
  for (DType t : {DType::F32, DType::F64, DType::F16, DType::BF16})
    for (const Setting &s : settings) {
      SCOPED_TRACE(std::string(dtypeName(t)) + " step " + std::to_string(s.step));
      double rtol = t == DType::F32 ? 1e-6 : t == DType::F64 ? 1e-14 : t == DType::F16 ? 2e-3 : 1.6e-2;
      compareWithCpu(device, OpKind::AdamW,
                     {filled(t, shape, 1), filled(t, shape, 2, -0.1f, 0.1f),
                      filled(t, shape, 3, -0.05f, 0.05f), filled(t, shape, 4, 0, 1e-3f),
                      scalarF32(s.lr), scalarF32(s.step)},
                     {Tensor(t, shape), Tensor(t, shape), Tensor(t, shape)},
                     {{"beta1", s.beta1}, {"beta2", s.beta2}, {"epsilon", s.eps}, {"weight_decay", s.wd}}, rtol,
                     1e-12);
    }
}

// Tests the clip's scale as AdamW's grad_scale operand (cpc-fuse-optimizer's form).
TEST(OptimizerGpu, AdamWWithGradScale) {
  CPC_REQUIRE_GPU(device);
  const std::vector<int64_t> shape = {1031, 257};
  for (DType t : {DType::F32, DType::F64, DType::F16, DType::BF16}) {
    SCOPED_TRACE(dtypeName(t));
    double rtol = t == DType::F32 ? 1e-6 : t == DType::F64 ? 1e-14 : t == DType::F16 ? 2e-3 : 1.6e-2;
    Tensor scale = convertF32(scalarF32(0.37f), t);
    compareWithCpu(device, OpKind::AdamW,
                   {filled(t, shape, 1), filled(t, shape, 2, -3, 3), filled(t, shape, 3, -0.05f, 0.05f),
                    filled(t, shape, 4, 0, 1e-3f), scalarF32(5e-2f), scalarF32(3), scale},
                   {Tensor(t, shape), Tensor(t, shape), Tensor(t, shape)},
                   {{"beta1", 0.9}, {"beta2", 0.95}, {"epsilon", 1e-8}, {"weight_decay", 0.05}}, rtol, 1e-12);
  }
}

// Tests the multi-tensor update against the CPU's: more tensors than one launch holds, big,
// tiny and empty ones, each with its weight decay.
TEST(OptimizerGpu, MultiTensorAdamW) {
  CPC_REQUIRE_GPU(device);
  std::vector<std::vector<int64_t>> shapes = {{1031, 257}, {7}, {0}, {384}};
  for (int i = 0; i < 30; ++i)
    shapes.push_back({1 + (i * 977) % 5000});
  size_t n = shapes.size();
  for (DType t : {DType::F32, DType::F64, DType::BF16}) {
    SCOPED_TRACE(dtypeName(t));
    double rtol = t == DType::F32 ? 1e-6 : t == DType::F64 ? 1e-14 : 1.6e-2;
    std::vector<Tensor> inputs = {scalarF32(5e-2f), scalarF32(3), convertF32(scalarF32(0.37f), t)};
    for (int group = 0; group < 4; ++group)
      for (size_t i = 0; i < n; ++i)
        inputs.push_back(group == 3 ? filled(t, shapes[i], 100 + i, 0, 1e-3f) : filled(t, shapes[i], group * 50 + i));
    std::vector<Tensor> outputs;
    std::vector<double> decays;
    for (int r = 0; r < 3; ++r)
      for (size_t i = 0; i < n; ++i)
        outputs.push_back(Tensor(t, shapes[i]));
    for (size_t i = 0; i < n; ++i)
      decays.push_back(i % 2 ? 0.0 : 0.05);
    compareWithCpu(device, OpKind::MultiTensorAdamW, inputs, outputs,
                   {{"beta1", 0.9}, {"beta2", 0.95}, {"epsilon", 1e-8}, {"weight_decays", decays}}, rtol, 1e-12);
  }
}

// Tests random_uniform: the GPU draws exactly the CPU's values (rtol and atol 0).
TEST(OptimizerGpu, RandomUniformIsBitIdentical) {
  CPC_REQUIRE_GPU(device);
  for (DType t : {DType::F32, DType::F64, DType::F16, DType::BF16})
    for (auto [seed, low, high] : {std::tuple{0, 0.0, 1.0}, std::tuple{42, -2.0, 3.0}, std::tuple{-9, 1e3, 1e3 + 1e-3}}) {
      SCOPED_TRACE(std::string(dtypeName(t)) + " seed " + std::to_string(seed));
      compareWithCpu(device, OpKind::RandomUniform, {}, {Tensor(t, {3, 100003})},
                     {{"seed", seed}, {"low", low}, {"high", high}}, 0, 0);
    }
}

// Tests the byte copies on every element type (reshape to another shape of the same size).
TEST(OptimizerGpu, VariableCopies) {
  CPC_REQUIRE_GPU(device);
  for (DType t : kEveryType) {
    Tensor x(t, {12, 35});
    if (isFloatDType(t)) // finite values (bytes could spell infinities, which compare unequal)
      x = filled(t, {12, 35}, 5, -1e3f, 1e3f);
    else
      for (size_t i = 0; i < x.bytes.size(); ++i)
        x.bytes[i] = uint8_t(t == DType::I1 ? i % 2 : i * 37 + 11);
    for (OpKind op : {OpKind::Assign, OpKind::Copy, OpKind::StopGradient}) {
      SCOPED_TRACE(std::string(opName(op)) + " " + dtypeName(t));
      nlohmann::json attrs = op == OpKind::Assign ? nlohmann::json{{"name", "x"}} : nlohmann::json::object();
      compareWithCpu(device, op, {x}, {Tensor(t, {12, 35})}, attrs, 0, 0);
    }
    SCOPED_TRACE(std::string("cpc.reshape ") + dtypeName(t));
    compareWithCpu(device, OpKind::Reshape, {x}, {Tensor(t, {7, 5, 12})}, nlohmann::json::object(), 0, 0);
  }
}

} // namespace
