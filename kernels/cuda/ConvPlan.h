//===- ConvPlan.h - cpc.conv2d and its gradients as cuDNN calls, on the host ===//
//
// Plain C++ (no CUDA headers), header-only so that the unit tests (tests/unit/cuda/
// ConvPlanTest.cpp) link without CUDA: they emulate what the plan hands cuDNN (an im2col
// cross-correlation with cuDNN's symmetric padding, over the explicitly padded copy when there
// is one) and compare it with the CPU kernels.
//
// cuDNN's legacy convolution API pads symmetrically and computes its output extent with floor
// division. The CPU kernels (kernels/cpu/Linalg.cpp, Backward.cpp) take [top, left, bottom,
// right] padding, possibly asymmetric or negative, and C++'s truncating division. Whenever the
// two differ, the plan pads explicitly: the input is copied into a zero-padded buffer (the input
// gradient is computed into one and cropped), and cuDNN runs without padding.
//
#ifndef CPC_KERNELS_CUDA_CONVPLAN_H
#define CPC_KERNELS_CUDA_CONVPLAN_H

#include "kernels/Tensor.h"
#include "kernels/cuda/HostDevice.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>
#include <vector>

namespace cpc::kernels::cuda {

enum class ConvOp { Forward, GradInput, GradWeight };

struct ConvPlan {
  std::string error; // non-empty: shapes or attributes the CPU kernel rejects (or cuDNN cannot take)
  // NCHW input x, OIHW weight w, NCHW output y.
  int64_t N = 0, C = 0, H = 0, W = 0, O = 0, KH = 0, KW = 0, OH = 0, OW = 0, G = 1;
  int64_t strideH = 1, strideW = 1, dilationH = 1, dilationW = 1;
  int64_t padTop = 0, padLeft = 0, padBottom = 0, padRight = 0;
  // What cuDNN is given: the input's spatial extent and a symmetric padding.
  bool prePad = false; // x goes through a zero-padded copy (dx through one that is cropped)
  int64_t cudnnH = 0, cudnnW = 0, cudnnPadH = 0, cudnnPadW = 0;
  bool empty = false;      // the op's result has no elements: nothing to do
  bool zeroResult = false; // an empty sum: the result is zeros (the bias, forward), no cuDNN call

  bool ok() const { return error.empty(); }
  int64_t groupChannels() const { return C / G; }
  std::vector<int64_t> cudnnInputShape() const { return {N, C, cudnnH, cudnnW}; }
  std::vector<int64_t> weightShape() const { return {O, C / G, KH, KW}; }
  std::vector<int64_t> outputShape() const { return {N, O, OH, OW}; }
};

/// The cuDNN calls of `op`. Operands in the CPU kernels' order: Forward (x, w[, bias]) -> y;
/// GradInput (dy, w) -> dx; GradWeight (x, dy) -> dw. `x`, `w`, `y` are the shapes of the
/// convolution's input, weight and output whichever of them is the result; `biasElements` is
/// the forward bias's element count (-1: none). Checks and messages are the CPU kernels'.
inline ConvPlan planConv(ConvOp op, const std::vector<int64_t> &x, const std::vector<int64_t> &w,
                         const std::vector<int64_t> &y, const std::vector<int64_t> &strides,
                         const std::vector<int64_t> &padding, const std::vector<int64_t> &dilations, int64_t groups,
                         int64_t biasElements = -1) {
  ConvPlan p;
  bool forward = op == ConvOp::Forward;
  if (x.size() != 4 || w.size() != 4 || y.size() != 4) {
    p.error = forward ? "expects NCHW input, OIHW weight and an NCHW result"
                      : "expects NCHW input, OIHW weight and an NCHW gradient";
    return p;
  }
  if (strides.size() != 2 || padding.size() != 4 || dilations.size() != 2) {
    p.error = "strides/dilations need 2 values and padding 4";
    return p;
  }
  p.N = x[0], p.C = x[1], p.H = x[2], p.W = x[3];
  p.O = w[0], p.KH = w[2], p.KW = w[3], p.OH = y[2], p.OW = y[3], p.G = groups;
  p.strideH = strides[0], p.strideW = strides[1], p.dilationH = dilations[0], p.dilationW = dilations[1];
  p.padTop = padding[0], p.padLeft = padding[1], p.padBottom = padding[2], p.padRight = padding[3];
  // The CPU forward kernel does not check this (it would divide by zero); its gradients do.
  if (p.strideH < 1 || p.strideW < 1 || p.dilationH < 1 || p.dilationW < 1) {
    p.error = "strides and dilations must be >= 1";
    return p;
  }
  if (p.G < 1 || p.C % p.G || p.O % p.G || w[1] != p.C / p.G) {
    p.error = "weight " + shapeString(w) + " does not fit input " + shapeString(x) + " with groups=" +
              std::to_string(p.G);
    return p;
  }
  // The CPU kernels' extent: C++ division truncates toward zero.
  int64_t expectOH = (p.H + p.padTop + p.padBottom - p.dilationH * (p.KH - 1) - 1) / p.strideH + 1;
  int64_t expectOW = (p.W + p.padLeft + p.padRight - p.dilationW * (p.KW - 1) - 1) / p.strideW + 1;
  if (y[0] != p.N || y[1] != p.O || p.OH != expectOH || p.OW != expectOW) {
    p.error = forward ? "result " + shapeString(y) + " does not match the convolution"
                      : "gradient " + shapeString(y) + " is not the conv output shape for input " + shapeString(x) +
                            " and weight " + shapeString(w);
    return p;
  }
  if (forward && biasElements >= 0 && biasElements != p.O) {
    p.error = "bias must have " + std::to_string(p.O) + " elements";
    return p;
  }

  int64_t reduced = p.C / p.G * p.KH * p.KW, positions = p.OH * p.OW;
  const std::vector<int64_t> &result = op == ConvOp::Forward ? y : op == ConvOp::GradInput ? x : w;
  p.empty = numElements(result) == 0;
  if (op == ConvOp::Forward)
    p.zeroResult = reduced == 0;
  else if (op == ConvOp::GradInput)
    p.zeroResult = p.O == 0 || positions == 0 || reduced == 0;
  else
    p.zeroResult = p.N == 0 || positions == 0;
  if (p.empty || p.zeroResult) {
    p.zeroResult = !p.empty;
    return p;
  }

  // The input extent cuDNN needs for OH x OW outputs; cuDNN's floor division gives OH back.
  int64_t needH = (p.OH - 1) * p.strideH + p.dilationH * (p.KH - 1) + 1;
  int64_t needW = (p.OW - 1) * p.strideW + p.dilationW * (p.KW - 1) + 1;
  bool symmetric = p.padTop == p.padBottom && p.padLeft == p.padRight && p.padTop >= 0 && p.padLeft >= 0 &&
                   p.H + 2 * p.padTop >= needH && p.W + 2 * p.padLeft >= needW;
  if (symmetric) {
    p.cudnnH = p.H, p.cudnnW = p.W, p.cudnnPadH = p.padTop, p.cudnnPadW = p.padLeft;
  } else {
    // Padding at most what the CPU pads (rows it never reads cost nothing), at least what the
    // outputs read (a truncated extent reads zeros beyond the input).
    p.prePad = true;
    p.cudnnH = std::max(p.H + p.padTop + p.padBottom, needH);
    p.cudnnW = std::max(p.W + p.padLeft + p.padRight, needW);
  }
  // The legacy API's descriptors take int dims and strides.
  for (const std::vector<int64_t> &s : {p.cudnnInputShape(), p.weightShape(), p.outputShape(), x})
    if (numElements(s) > INT_MAX) {
      p.error = "tensor " + shapeString(s) + " is too large for cuDNN's 32-bit sizes";
      return p;
    }
  return p;
}

/// A window copy over [planes, dstH, dstW]: dst[r, y, x] = src[r, y + offH, x + offW], zero
/// outside the source. Returns the source element of destination element `i`, or -1. With
/// offsets (-padTop, -padLeft) it pads x into the copy cuDNN reads; with (padTop, padLeft) it
/// crops the padded input gradient back to dx (rows of negative padding get zero gradient).
CPC_HD int64_t windowSource(int64_t i, int64_t dstH, int64_t dstW, int64_t srcH, int64_t srcW, int64_t offH,
                            int64_t offW) {
  int64_t xw = i % dstW, rest = i / dstW;
  int64_t yh = rest % dstH, plane = rest / dstH;
  int64_t sy = yh + offH, sx = xw + offW;
  if (sy < 0 || sy >= srcH || sx < 0 || sx >= srcW)
    return -1;
  return (plane * srcH + sy) * srcW + sx;
}

/// The bias element of output element `i` of an NCHW result with `positions` = OH * OW.
CPC_HD int64_t biasChannel(int64_t i, int64_t positions, int64_t channels) { return (i / positions) % channels; }

} // namespace cpc::kernels::cuda

#endif
