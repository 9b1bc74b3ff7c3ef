//===- Pooling.cpp - ONNX BatchNormalization, MaxPool, AveragePool -> cpc -===//
//
// Written with the dialect's reductions, pads, strided slices and elementwise ops, so each brings
// those ops' gradients, sharding rules, costs and kernels along: batch statistics are a mean over
// the batch dim (split over dp, it becomes an all-reduced mean: SyncBatchNorm's statistics), and a
// pooling window is the max or sum of k*k strided slices of the padded input.
//===----------------------------------------------------------------------===//
#include "frontends/onnx/NodeImporter.h"

#include <limits>

using namespace mlir;

namespace cpc::onnx_import {
namespace {

/// A per-channel [C] operand as [1, C, 1, ...] for an input of rank `rank`.
Value perChannel(NodeImporter &n, size_t i, int64_t channels, int64_t rank) {
  if (n.inputShape(i) != std::vector<int64_t>{channels})
    n.fail("input " + std::to_string(i) + " must have shape [" + std::to_string(channels) + "], got " +
           shapeToString(n.inputShape(i)));
  std::vector<int64_t> shape(rank, 1);
  shape[1] = channels;
  return n.reshape(n.input(i), shape);
}

/// BatchNormalization: with training_mode (opset >= 14), normalized by the batch's mean and
/// (biased) variance over every dim but the channel dim; the running-statistics outputs are the
/// momentum blends ONNX defines. Without it, by the running statistics given as inputs.
void importBatchNormalization(NodeImporter &n) {
  std::vector<int64_t> in = n.inputShape(0);
  int64_t rank = in.size();
  if (rank < 2 || !llvm::isa<FloatType>(n.inputType(0).getElementType()))
    n.fail("input must be a float tensor N x C x ...");
  Type et = n.inputType(0).getElementType();
  double epsilon = n.attrFloat("epsilon", 1e-5), momentum = n.attrFloat("momentum", 0.9);
  bool training = n.attrInt("training_mode", 0) != 0;
  Value x = n.input(0), scale = perChannel(n, 1, in[1], rank), bias = perChannel(n, 2, in[1], rank);
  Value runMean = perChannel(n, 3, in[1], rank), runVar = perChannel(n, 4, in[1], rank);
  Value mean = runMean, var = runVar;
  if (training) {
    std::vector<int64_t> axes{0};
    for (int64_t d = 2; d < rank; ++d)
      axes.push_back(d);
    auto reduceMean = [&](Value v) {
      return n.emit1<ReduceMeanOp>({v}, {n.namedI64s("axes", axes), n.namedBool("keepdims", true)});
    };
    mean = reduceMean(x);
    Value centered = n.emit1<SubOp>({x, mean});
    var = reduceMean(n.emit1<MulOp>({centered, centered}));
    auto blend = [&](Value running, Value current) {
      Value kept = n.emit1<MulOp>({running, n.scalar(momentum, et)});
      return n.reshape(n.emit1<AddOp>({kept, n.emit1<MulOp>({current, n.scalar(1 - momentum, et)})}), {in[1]});
    };
    if (n.node().output_size() > 1 && !n.node().output(1).empty())
      n.setOutput(1, blend(runMean, mean));
    if (n.node().output_size() > 2 && !n.node().output(2).empty())
      n.setOutput(2, blend(runVar, var));
  } else if (n.node().output_size() > 1) {
    n.fail("running-statistics outputs need training_mode = 1");
  }
  Value inv = n.emitTyped<RsqrtOp>(var.getType(), {n.emit1<AddOp>({var, n.scalar(epsilon, et)})});
  Value y = n.emit1<MulOp>({n.emit1<SubOp>({x, mean}), n.emit1<MulOp>({inv, scale})});
  n.setOutput(0, n.emit1<AddOp>({y, bias}));
}

/// The windows of a 2-D pool: kernel, strides, pads (top, left, bottom, right), output size.
struct PoolWindow {
  std::vector<int64_t> kernel, strides, pads, out;
};

PoolWindow poolWindow(NodeImporter &n) {
  std::vector<int64_t> in = n.inputShape(0);
  if (in.size() != 4)
    n.fail("pooling over other than 2 spatial dims (N x C x H x W) is not supported, got rank " + std::to_string(in.size()));
  PoolWindow w;
  w.kernel = n.attrInts("kernel_shape");
  w.strides = n.attrInts("strides", std::vector<int64_t>{1, 1});
  w.pads = n.attrInts("pads", std::vector<int64_t>{0, 0, 0, 0});
  std::string autoPad = n.attrString("auto_pad", "NOTSET");
  if (autoPad != "NOTSET" && autoPad != "VALID")
    n.fail("auto_pad " + autoPad + " is not supported; export with explicit pads");
  if (autoPad == "VALID")
    w.pads = {0, 0, 0, 0};
  if (n.attrInt("ceil_mode", 0) != 0)
    n.fail("ceil_mode = 1 is not supported");
  if (n.attrInts("dilations", std::vector<int64_t>{1, 1}) != std::vector<int64_t>{1, 1})
    n.fail("dilations other than 1 are not supported");
  if (w.kernel.size() != 2 || w.strides.size() != 2 || w.pads.size() != 4)
    n.fail("kernel_shape, strides and pads must describe 2 spatial dims");
  for (int d = 0; d < 2; ++d) {
    int64_t padded = in[2 + d] + w.pads[d] + w.pads[d + 2];
    if (w.kernel[d] < 1 || w.strides[d] < 1 || padded < w.kernel[d])
      n.fail("a " + std::to_string(w.kernel[d]) + "-wide window does not fit");
    w.out.push_back((padded - w.kernel[d]) / w.strides[d] + 1);
  }
  return w;
}

/// The input padded with `value`, and each window position's strided slice of it, in order.
std::vector<Value> windowSlices(NodeImporter &n, const PoolWindow &w, double value) {
  std::vector<int64_t> in = n.inputShape(0);
  Value x = n.input(0);
  if (w.pads != std::vector<int64_t>{0, 0, 0, 0})
    x = n.emit1<PadOp>({x}, {n.namedI64s("low_padding", {0, 0, w.pads[0], w.pads[1]}),
                             n.namedI64s("high_padding", {0, 0, w.pads[2], w.pads[3]}),
                             n.namedI64s("interior_padding", {0, 0, 0, 0}), n.namedF64("value", value)});
  std::vector<Value> slices;
  for (int64_t a = 0; a < w.kernel[0]; ++a)
    for (int64_t b = 0; b < w.kernel[1]; ++b) {
      std::vector<int64_t> lo{0, 0, a, b};
      std::vector<int64_t> hi{in[0], in[1], a + (w.out[0] - 1) * w.strides[0] + 1, b + (w.out[1] - 1) * w.strides[1] + 1};
      slices.push_back(n.emit1<SliceOp>({x}, {n.namedI64s("starts", lo), n.namedI64s("limits", hi),
                                              n.namedI64s("strides", {1, 1, w.strides[0], w.strides[1]})}));
    }
  return slices;
}

void importMaxPool(NodeImporter &n) {
  if (n.node().output_size() > 1 && !n.node().output(1).empty())
    n.fail("the Indices output is not supported");
  PoolWindow w = poolWindow(n);
  std::vector<Value> slices = windowSlices(n, w, -std::numeric_limits<double>::infinity());
  Value y = slices[0];
  for (size_t i = 1; i < slices.size(); ++i)
    y = n.emit1<MaxOp>({y, slices[i]});
  n.setOutput(0, y);
}

/// AveragePool: the window sums over the window's size (count_include_pad) or over the number of
/// input elements in each window, a constant of the output's spatial shape.
void importAveragePool(NodeImporter &n) {
  PoolWindow w = poolWindow(n);
  std::vector<int64_t> in = n.inputShape(0);
  std::vector<Value> slices = windowSlices(n, w, 0.0);
  Value sum = slices[0];
  for (size_t i = 1; i < slices.size(); ++i)
    sum = n.emit1<AddOp>({sum, slices[i]});
  Type et = n.inputType(0).getElementType();
  if (n.attrInt("count_include_pad", 0) != 0) {
    n.setOutput(0, n.emit1<MulOp>({sum, n.scalar(1.0 / (w.kernel[0] * w.kernel[1]), et)}));
    return;
  }
  std::vector<double> inverse;
  for (int64_t i = 0; i < w.out[0]; ++i)
    for (int64_t j = 0; j < w.out[1]; ++j) {
      auto covered = [&](int64_t pos, int d) {
        int64_t start = pos * w.strides[d] - w.pads[d];
        return std::min(start + w.kernel[d], in[2 + d]) - std::max<int64_t>(start, 0);
      };
      inverse.push_back(1.0 / double(covered(i, 0) * covered(j, 1)));
    }
  auto dtype = n.inputType(0).getElementType().isF64() ? onnx::TensorProto_DataType_DOUBLE
                                                       : onnx::TensorProto_DataType_FLOAT;
  Value scale = n.constant(ConstTensor::fromDoubles(inverse, {1, 1, w.out[0], w.out[1]}, dtype));
  if (!et.isF32() && !et.isF64())
    scale = n.emitTyped<CastOp>(RankedTensorType::get({1, 1, w.out[0], w.out[1]}, et), {scale});
  n.setOutput(0, n.emit1<MulOp>({sum, scale}));
}

} // namespace

void registerPoolingHandlers(HandlerRegistry &r) {
  r.add("BatchNormalization", importBatchNormalization, 14, kNewestOpset);
  r.add("MaxPool", importMaxPool, 12, kNewestOpset);
  r.add("AveragePool", importAveragePool, 11, kNewestOpset);
}

} // namespace cpc::onnx_import
