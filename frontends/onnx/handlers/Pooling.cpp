//===- Pooling.cpp - ONNX Batch/GroupNormalization, MaxPool, AveragePool -===//
//
// Written with the dialect's reductions, pads, strided slices and elementwise ops, so each brings
// those ops' gradients, sharding rules, costs and kernels along: batch statistics are a mean over
// the batch dim (split over dp, an all-reduced mean: SyncBatchNorm's; or, viewed as groups of rows,
// each rank's own), and a pooling window is the max or sum of the kernel's strided slices of the
// padded input.
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

/// GroupNormalization: each sample's channels in num_groups groups, each group normalized by its
/// mean and (biased) variance over its channels and positions, then scaled and shifted per
/// channel (opset 21) or per group (opset 18, where scale and bias have num_groups entries).
void importGroupNormalization(NodeImporter &n) {
  std::vector<int64_t> in = n.inputShape(0);
  if (in.size() < 3 || !llvm::isa<FloatType>(n.inputType(0).getElementType()))
    n.fail("input must be a float tensor N x C x D1 ...");
  int64_t groups = n.attrInt("num_groups"), channels = in[1];
  if (groups < 1 || channels % groups != 0)
    n.fail("num_groups " + std::to_string(groups) + " does not divide the " + std::to_string(channels) + " channels");
  Type et = n.inputType(0).getElementType();
  int64_t inner = channels / groups;
  for (size_t d = 2; d < in.size(); ++d)
    inner *= in[d];
  Value x = n.reshape(n.input(0), {in[0], groups, inner});
  auto reduceMean = [&](Value v) {
    return n.emit1<ReduceMeanOp>({v}, {n.namedI64s("axes", {2}), n.namedBool("keepdims", true)});
  };
  Value centered = n.emit1<SubOp>({x, reduceMean(x)});
  Value var = reduceMean(n.emit1<MulOp>({centered, centered}));
  Value inv = n.emitTyped<RsqrtOp>(var.getType(), {n.emit1<AddOp>({var, n.scalar(n.attrFloat("epsilon", 1e-5), et)})});
  Value y = n.emit1<MulOp>({centered, inv});
  if (n.opset() < 21) { // per group: [G] as [1, G, 1] on the grouped view
    y = n.emit1<AddOp>({n.emit1<MulOp>({y, perChannel(n, 1, groups, 3)}), perChannel(n, 2, groups, 3)});
    n.setOutput(0, n.reshape(y, in));
    return;
  }
  y = n.reshape(y, in);
  int64_t rank = in.size();
  n.setOutput(0, n.emit1<AddOp>({n.emit1<MulOp>({y, perChannel(n, 1, channels, rank)}), perChannel(n, 2, channels, rank)}));
}

/// The windows of a pool over the S spatial dims of N x C x D1 x ... x DS: kernel, strides,
/// dilations, pads (S begins, then S ends; from auto_pad where it says SAME), output size, and
/// with ceil_mode the positions the last windows reach past the end pads (padded too, but
/// counted by no average).
struct PoolWindow {
  std::vector<int64_t> kernel, strides, dilations, pads, out, ceilExtra;
  size_t spatial() const { return kernel.size(); }
  int64_t span(size_t d) const { return (kernel[d] - 1) * dilations[d] + 1; } // a window's extent
};

PoolWindow poolWindow(NodeImporter &n) {
  std::vector<int64_t> in = n.inputShape(0);
  if (in.size() < 3 || in.size() > 5)
    n.fail("pooling needs 1 to 3 spatial dims (N x C x D1 ...), got rank " + std::to_string(in.size()));
  size_t s = in.size() - 2;
  PoolWindow w;
  w.kernel = n.attrInts("kernel_shape");
  w.strides = n.attrInts("strides", std::vector<int64_t>(s, 1));
  w.dilations = n.attrInts("dilations", std::vector<int64_t>(s, 1));
  w.pads = n.attrInts("pads", std::vector<int64_t>(2 * s, 0));
  if (w.kernel.size() != s || w.strides.size() != s || w.dilations.size() != s || w.pads.size() != 2 * s)
    n.fail("kernel_shape, strides, dilations and pads must describe " + std::to_string(s) + " spatial dims");
  std::string autoPad = n.attrString("auto_pad", "NOTSET");
  if (autoPad != "NOTSET" && autoPad != "VALID" && autoPad != "SAME_UPPER" && autoPad != "SAME_LOWER")
    n.fail("auto_pad " + autoPad + " is not one of NOTSET, VALID, SAME_UPPER, SAME_LOWER");
  bool ceil = n.attrInt("ceil_mode", 0) != 0;
  w.ceilExtra.assign(s, 0);
  for (size_t d = 0; d < s; ++d) {
    if (w.kernel[d] < 1 || w.strides[d] < 1 || w.dilations[d] < 1)
      n.fail("kernel_shape, strides and dilations must be >= 1");
    int64_t size = in[2 + d];
    if (autoPad == "VALID") {
      w.pads[d] = w.pads[d + s] = 0;
    } else if (autoPad != "NOTSET") { // SAME: ceil(size / stride) outputs, the odd pad after (UPPER) or before
      int64_t outputs = (size + w.strides[d] - 1) / w.strides[d];
      int64_t total = std::max<int64_t>((outputs - 1) * w.strides[d] + w.span(d) - size, 0);
      w.pads[d] = autoPad == "SAME_UPPER" ? total / 2 : total - total / 2;
      w.pads[d + s] = total - w.pads[d];
    }
    int64_t padded = size + w.pads[d] + w.pads[d + s];
    if (padded < w.span(d))
      n.fail("a " + std::to_string(w.span(d)) + "-wide window does not fit");
    int64_t room = padded - w.span(d);
    int64_t outputs = (ceil ? (room + w.strides[d] - 1) / w.strides[d] : room / w.strides[d]) + 1;
    // ceil_mode: a last window must start inside the input or its leading pad (ONNX, torch).
    if (ceil && (outputs - 1) * w.strides[d] >= size + w.pads[d])
      --outputs;
    w.out.push_back(outputs);
    w.ceilExtra[d] = std::max<int64_t>((outputs - 1) * w.strides[d] + w.span(d) - padded, 0);
  }
  return w;
}

/// Each window position's offsets (one per spatial dim), in row-major order.
std::vector<std::vector<int64_t>> windowOffsets(const PoolWindow &w) {
  std::vector<std::vector<int64_t>> all{{}};
  for (size_t d = 0; d < w.spatial(); ++d) {
    std::vector<std::vector<int64_t>> next;
    for (const auto &prefix : all)
      for (int64_t k = 0; k < w.kernel[d]; ++k) {
        next.push_back(prefix);
        next.back().push_back(k * w.dilations[d]);
      }
    all = std::move(next);
  }
  return all;
}

/// The input padded with `value`, and each window position's strided slice of it, in order.
std::vector<Value> windowSlices(NodeImporter &n, const PoolWindow &w, double value) {
  std::vector<int64_t> in = n.inputShape(0);
  size_t s = w.spatial();
  Value x = n.input(0);
  std::vector<int64_t> low(2, 0), high(2, 0);
  for (size_t d = 0; d < s; ++d) {
    low.push_back(w.pads[d]);
    high.push_back(w.pads[d + s] + w.ceilExtra[d]);
  }
  if (llvm::any_of(low, [](int64_t v) { return v != 0; }) || llvm::any_of(high, [](int64_t v) { return v != 0; }))
    x = n.emit1<PadOp>({x}, {n.namedI64s("low_padding", low), n.namedI64s("high_padding", high),
                             n.namedI64s("interior_padding", std::vector<int64_t>(in.size(), 0)),
                             n.namedF64("value", value)});
  std::vector<int64_t> strides{1, 1};
  strides.insert(strides.end(), w.strides.begin(), w.strides.end());
  std::vector<Value> slices;
  for (const std::vector<int64_t> &offset : windowOffsets(w)) {
    std::vector<int64_t> lo{0, 0}, hi{in[0], in[1]};
    for (size_t d = 0; d < s; ++d) {
      lo.push_back(offset[d]);
      hi.push_back(offset[d] + (w.out[d] - 1) * w.strides[d] + 1);
    }
    slices.push_back(n.emit1<SliceOp>({x}, {n.namedI64s("starts", lo), n.namedI64s("limits", hi),
                                            n.namedI64s("strides", strides)}));
  }
  return slices;
}

/// MaxPool's Indices output for window tap `tap` (its offsets within the window): each output
/// position's flat index of that tap in its channel's spatial dims, row-major or, with
/// storage_order 1, column-major; shaped 1 x 1 x out so it broadcasts over N and C.
ConstTensor tapIndices(const PoolWindow &w, const std::vector<int64_t> &in, const std::vector<int64_t> &tap,
                       bool columnMajor) {
  size_t s = w.spatial();
  std::vector<int64_t> stride(s, 1);
  for (size_t d = 0; d < s; ++d)
    for (size_t e = 0; e < s; ++e)
      if (columnMajor ? e < d : e > d)
        stride[d] *= in[2 + e];
  std::vector<int64_t> shape{1, 1};
  shape.insert(shape.end(), w.out.begin(), w.out.end());
  ConstTensor at(onnx::TensorProto_DataType_INT64, shape);
  for (int64_t i = 0; i < at.numElements(); ++i) {
    int64_t rest = i, flat = 0;
    for (size_t d = s; d-- > 0;) {
      int64_t pos = rest % w.out[d];
      rest /= w.out[d];
      flat += (pos * w.strides[d] - w.pads[d] + tap[d]) * stride[d];
    }
    at.set(i, (double)flat);
  }
  return at;
}

/// MaxPool: the maximum over the window's strided slices; with the Indices output, the flat
/// index (over N x C x spatial) of the first maximal tap, as ONNX's reference and torch.
void importMaxPool(NodeImporter &n) {
  PoolWindow w = poolWindow(n);
  std::vector<Value> slices = windowSlices(n, w, -std::numeric_limits<double>::infinity());
  bool wantIndices = n.node().output_size() > 1 && !n.node().output(1).empty();
  std::vector<int64_t> in = n.inputShape(0);
  std::vector<std::vector<int64_t>> taps = windowOffsets(w);
  bool columnMajor = n.attrInt("storage_order", 0) != 0;
  Value y = slices[0];
  Value indices = wantIndices ? n.constant(tapIndices(w, in, taps[0], columnMajor)) : Value();
  for (size_t i = 1; i < slices.size(); ++i) {
    if (wantIndices) { // a later tap wins only when strictly greater: the first maximum's index
      Value later = n.emit1<GreaterOp>({slices[i], y});
      indices = n.emit1<WhereOp>({later, n.constant(tapIndices(w, in, taps[i], columnMajor)), indices});
    }
    y = n.emit1<MaxOp>({y, slices[i]});
  }
  n.setOutput(0, y);
  if (!wantIndices)
    return;
  int64_t spatialSize = 1;
  for (size_t d = 2; d < in.size(); ++d)
    spatialSize *= in[d];
  std::vector<int64_t> channelShape(in.size(), 1);
  channelShape[0] = in[0];
  channelShape[1] = in[1];
  ConstTensor channelBase(onnx::TensorProto_DataType_INT64, channelShape);
  for (int64_t i = 0; i < in[0] * in[1]; ++i)
    channelBase.set(i, (double)(i * spatialSize));
  n.setOutput(1, n.emit1<AddOp>({indices, n.constant(channelBase)}));
}

/// How many of a window's taps along spatial dim d, starting at output position `pos`, an
/// average counts: those inside the input (and the pads with count_include_pad).
int64_t countedTaps(const PoolWindow &w, size_t d, int64_t size, int64_t pos, bool includePad) {
  int64_t start = pos * w.strides[d] - w.pads[d];
  int64_t lo = includePad ? -w.pads[d] : 0, hi = size + (includePad ? w.pads[d + w.spatial()] : 0);
  int64_t taps = 0;
  for (int64_t k = 0; k < w.kernel[d]; ++k)
    taps += start + k * w.dilations[d] >= lo && start + k * w.dilations[d] < hi;
  return taps;
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
  if (includePad && llvm::all_of(w.ceilExtra, [](int64_t e) { return e == 0; })) {
    n.setOutput(0, n.emit1<MulOp>({sum, n.scalar(1.0 / (double)slices.size(), et)}));
    return;
  }
  // The divisor is a product over the spatial dims of each position's counted taps.
  std::vector<int64_t> shape{1, 1};
  shape.insert(shape.end(), w.out.begin(), w.out.end());
  std::vector<double> inverse{1.0};
  for (size_t d = 0; d < w.spatial(); ++d) {
    std::vector<double> next;
    for (double prefix : inverse)
      for (int64_t pos = 0; pos < w.out[d]; ++pos)
        next.push_back(prefix / (double)countedTaps(w, d, in[2 + d], pos, includePad));
    inverse = std::move(next);
  }
  auto dtype = et.isF64() ? onnx::TensorProto_DataType_DOUBLE : onnx::TensorProto_DataType_FLOAT;
  Value scale = n.constant(ConstTensor::fromDoubles(inverse, shape, dtype));
  if (!et.isF32() && !et.isF64())
    scale = n.emitTyped<CastOp>(RankedTensorType::get(shape, et), {scale});
  n.setOutput(0, n.emit1<MulOp>({sum, scale}));
}

} // namespace

void registerPoolingHandlers(HandlerRegistry &r) {
  r.add("BatchNormalization", importBatchNormalization, 14, kNewestOpset);
  r.add("GroupNormalization", importGroupNormalization, 18, kNewestOpset);
  r.add("MaxPool", importMaxPool, 12, kNewestOpset);
  r.add("AveragePool", importAveragePool, 11, kNewestOpset);
}

} // namespace cpc::onnx_import
