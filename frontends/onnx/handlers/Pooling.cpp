//===- Pooling.cpp - ONNX BatchNormalization, MaxPool, AveragePool -> cpc -===//
//
// Written with the dialect's reductions, pads, strided slices and elementwise ops, so each brings
// those ops' gradients, sharding rules, costs and kernels along: batch statistics are a mean over
// the batch dim (split over dp, it becomes an all-reduced mean: SyncBatchNorm's statistics), and a
// pooling window is the max or sum of k*k strided slices of the padded input.
//===----------------------------------------------------------------------===//
#include "dialects/cpc/Variables.h"
#include "frontends/onnx/NodeImporter.h"

#include <limits>

using namespace mlir;

namespace cpc::onnx_import {
namespace {

/// A per-channel [C] operand as [1, C, 1, ...] (`channelDim` 1 of `rank` dims; 2 in the
/// grouped layout [G, N/G, C, ...]).
Value perChannel(NodeImporter &n, size_t i, int64_t channels, int64_t rank, int64_t channelDim = 1) {
  if (n.inputShape(i) != std::vector<int64_t>{channels})
    n.fail("input " + std::to_string(i) + " must have shape [" + std::to_string(channels) + "], got " +
           shapeToString(n.inputShape(i)));
  std::vector<int64_t> shape(rank, 1);
  shape[channelDim] = channels;
  return n.reshape(n.input(i), shape);
}

/// The running statistic `running` (input i) blended with this batch's `current` ([C]) by ONNX's
/// momentum; when the input is a model variable (torch's running_mean / running_var buffer),
/// the blend is also written back to it, once per forward as torch does, and it does not train.
Value updateRunningStatistic(NodeImporter &n, size_t i, Value current, double momentum) {
  Type et = n.inputType(0).getElementType();
  Value running = n.input(i);
  Value kept = n.emit1<MulOp>({running, n.scalar(momentum, et)});
  Value blended = n.emit1<AddOp>({kept, n.emit1<MulOp>({current, n.scalar(1 - momentum, et)})});
  if (auto variable = running.getDefiningOp<ParameterOp>()) {
    variable.getVariable().setTrainable(false);
    assignVariable(n.builder(), n.loc(), blended, variable.getName());
  }
  return blended;
}

/// BatchNormalization: with training_mode (opset >= 14), normalized by the batch's mean and
/// (biased) variance over every dim but the channel dim, and the running statistics updated as
/// torch does (mean and unbiased variance, blended by momentum) into their variables. With G
/// batch-statistic groups (the import option: G data-parallel ranks without --sync-bn), the
/// batch [N, C, ...] is viewed as [G, N/G, C, ...] and each group of rows has statistics of its
/// own, as each rank's BatchNorm under DDP; the running statistics follow group 0 (DDP
/// broadcasts rank 0's buffers). Without training_mode, normalized by the running statistics.
void importBatchNormalization(NodeImporter &n) {
  std::vector<int64_t> in = n.inputShape(0);
  int64_t rank = in.size();
  if (rank < 2 || !llvm::isa<FloatType>(n.inputType(0).getElementType()))
    n.fail("input must be a float tensor N x C x ...");
  Type et = n.inputType(0).getElementType();
  double epsilon = n.attrFloat("epsilon", 1e-5), momentum = n.attrFloat("momentum", 0.9);
  bool training = n.attrInt("training_mode", 0) != 0;
  if (!training) {
    if (n.node().output_size() > 1)
      n.fail("running-statistics outputs need training_mode = 1");
    Value mean = perChannel(n, 3, in[1], rank), var = perChannel(n, 4, in[1], rank);
    Value inv = n.emitTyped<RsqrtOp>(var.getType(), {n.emit1<AddOp>({var, n.scalar(epsilon, et)})});
    Value y = n.emit1<MulOp>({n.emit1<SubOp>({n.input(0), mean}), n.emit1<MulOp>({inv, perChannel(n, 1, in[1], rank)})});
    n.setOutput(0, n.emit1<AddOp>({y, perChannel(n, 2, in[1], rank)}));
    return;
  }
  int64_t groups = n.batchStatisticGroups();
  if (groups > 1 && in[0] % groups != 0)
    n.fail("the batch of " + std::to_string(in[0]) + " does not split into " + std::to_string(groups) +
           " groups of per-rank statistics (use --sync-bn)");
  bool grouped = groups > 1;
  std::vector<int64_t> view = in;
  if (grouped) {
    view[0] = in[0] / groups;
    view.insert(view.begin(), groups);
  }
  int64_t viewRank = view.size(), channelDim = grouped ? 2 : 1;
  Value x = grouped ? n.reshape(n.input(0), view) : n.input(0);
  std::vector<int64_t> axes; // every dim but the groups and the channels
  int64_t count = 1;
  for (int64_t d = grouped ? 1 : 0; d < viewRank; ++d)
    if (d != channelDim) {
      axes.push_back(d);
      count *= view[d];
    }
  auto reduceMean = [&](Value v) {
    return n.emit1<ReduceMeanOp>({v}, {n.namedI64s("axes", axes), n.namedBool("keepdims", true)});
  };
  Value mean = reduceMean(x);
  Value centered = n.emit1<SubOp>({x, mean});
  Value var = reduceMean(n.emit1<MulOp>({centered, centered}));
  Value inv = n.emitTyped<RsqrtOp>(var.getType(), {n.emit1<AddOp>({var, n.scalar(epsilon, et)})});
  Value scale = perChannel(n, 1, in[1], viewRank, channelDim), bias = perChannel(n, 2, in[1], viewRank, channelDim);
  Value y = n.emit1<AddOp>({n.emit1<MulOp>({centered, n.emit1<MulOp>({inv, scale})}), bias});
  n.setOutput(0, grouped ? n.reshape(y, in) : y);

  // The running statistics: group 0's batch mean and unbiased variance, as [C].
  auto perChannelOfGroup0 = [&](Value v) {
    if (grouped) {
      std::vector<int64_t> lo(viewRank, 0), hi(viewRank, 1), step(viewRank, 1);
      hi[channelDim] = in[1];
      v = n.emit1<SliceOp>({v}, {n.namedI64s("starts", lo), n.namedI64s("limits", hi), n.namedI64s("strides", step)});
    }
    return n.reshape(v, {in[1]});
  };
  Value batchMean = perChannelOfGroup0(mean), batchVar = perChannelOfGroup0(var);
  double bessel = count > 1 ? (double)count / (count - 1) : 1.0;
  Value runMean = updateRunningStatistic(n, 3, batchMean, momentum);
  Value runVar = updateRunningStatistic(n, 4, n.emit1<MulOp>({batchVar, n.scalar(bessel, et)}), momentum);
  // ONNX's outputs: the blends (its running_var blends the biased variance).
  if (n.node().output_size() > 1 && !n.node().output(1).empty())
    n.setOutput(1, runMean);
  if (n.node().output_size() > 2 && !n.node().output(2).empty())
    n.setOutput(2, bessel == 1.0 ? runVar : n.emit1<AddOp>({n.emit1<MulOp>({n.input(4), n.scalar(momentum, et)}),
                                                              n.emit1<MulOp>({batchVar, n.scalar(1 - momentum, et)})}));
}

/// The windows of a 2-D pool: kernel, strides, pads (top, left, bottom, right; from auto_pad
/// where it says SAME), output size, and with ceil_mode the rows and columns the last windows
/// reach past the bottom and right pads (padded too, but counted by no average).
struct PoolWindow {
  std::vector<int64_t> kernel, strides, pads, out, ceilExtra{0, 0};
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
  if (autoPad != "NOTSET" && autoPad != "VALID" && autoPad != "SAME_UPPER" && autoPad != "SAME_LOWER")
    n.fail("auto_pad " + autoPad + " is not one of NOTSET, VALID, SAME_UPPER, SAME_LOWER");
  if (n.attrInts("dilations", std::vector<int64_t>{1, 1}) != std::vector<int64_t>{1, 1})
    n.fail("dilations other than 1 are not supported");
  if (w.kernel.size() != 2 || w.strides.size() != 2 || w.pads.size() != 4)
    n.fail("kernel_shape, strides and pads must describe 2 spatial dims");
  bool ceil = n.attrInt("ceil_mode", 0) != 0;
  for (int d = 0; d < 2; ++d) {
    if (w.kernel[d] < 1 || w.strides[d] < 1)
      n.fail("kernel_shape and strides must be >= 1");
    if (autoPad == "VALID") {
      w.pads[d] = w.pads[d + 2] = 0;
    } else if (autoPad != "NOTSET") { // SAME: ceil(in / stride) outputs, the odd pad after (UPPER) or before
      int64_t outputs = (in[2 + d] + w.strides[d] - 1) / w.strides[d];
      int64_t total = std::max<int64_t>((outputs - 1) * w.strides[d] + w.kernel[d] - in[2 + d], 0);
      w.pads[d] = autoPad == "SAME_UPPER" ? total / 2 : total - total / 2;
      w.pads[d + 2] = total - w.pads[d];
    }
    int64_t padded = in[2 + d] + w.pads[d] + w.pads[d + 2];
    if (padded < w.kernel[d])
      n.fail("a " + std::to_string(w.kernel[d]) + "-wide window does not fit");
    int64_t span = padded - w.kernel[d];
    int64_t outputs = (ceil ? (span + w.strides[d] - 1) / w.strides[d] : span / w.strides[d]) + 1;
    // ceil_mode: a last window must start inside the input or its leading pad (ONNX, torch).
    if (ceil && (outputs - 1) * w.strides[d] >= in[2 + d] + w.pads[d])
      --outputs;
    w.out.push_back(outputs);
    w.ceilExtra[d] = std::max<int64_t>((outputs - 1) * w.strides[d] + w.kernel[d] - padded, 0);
  }
  return w;
}

/// The input padded with `value`, and each window position's strided slice of it, in order.
std::vector<Value> windowSlices(NodeImporter &n, const PoolWindow &w, double value) {
  std::vector<int64_t> in = n.inputShape(0);
  Value x = n.input(0);
  std::vector<int64_t> high{0, 0, w.pads[2] + w.ceilExtra[0], w.pads[3] + w.ceilExtra[1]};
  if (w.pads[0] || w.pads[1] || high[2] || high[3])
    x = n.emit1<PadOp>({x}, {n.namedI64s("low_padding", {0, 0, w.pads[0], w.pads[1]}),
                             n.namedI64s("high_padding", high),
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

/// AveragePool: the window sums over the window's size (count_include_pad), or over the number
/// of input elements in each window; a constant of the output's spatial shape where windows
/// differ (the pads excluded, or ceil_mode's last windows, which count no element past the pads).
void importAveragePool(NodeImporter &n) {
  PoolWindow w = poolWindow(n);
  std::vector<int64_t> in = n.inputShape(0);
  std::vector<Value> slices = windowSlices(n, w, 0.0);
  Value sum = slices[0];
  for (size_t i = 1; i < slices.size(); ++i)
    sum = n.emit1<AddOp>({sum, slices[i]});
  Type et = n.inputType(0).getElementType();
  bool includePad = n.attrInt("count_include_pad", 0) != 0;
  if (includePad && w.ceilExtra == std::vector<int64_t>{0, 0}) {
    n.setOutput(0, n.emit1<MulOp>({sum, n.scalar(1.0 / (w.kernel[0] * w.kernel[1]), et)}));
    return;
  }
  std::vector<double> inverse;
  for (int64_t i = 0; i < w.out[0]; ++i)
    for (int64_t j = 0; j < w.out[1]; ++j) {
      auto covered = [&](int64_t pos, int d) {
        int64_t start = pos * w.strides[d] - w.pads[d];
        int64_t lo = includePad ? -w.pads[d] : 0, hi = in[2 + d] + (includePad ? w.pads[d + 2] : 0);
        return std::min(start + w.kernel[d], hi) - std::max(start, lo);
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
