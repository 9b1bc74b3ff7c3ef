//===- Backward.cpp - pad and the fused VJP kernels -----------------------===//
//
// pad, gelu_grad, softmax_grad, layer_norm_grad, gather_grad, gather_elements_grad and the
// two conv2d gradients. Elementwise and row-wise kernels (gelu_grad, softmax_grad, the dx of
// layer_norm_grad) read every element they need before writing its own position, so their
// outputs may alias a same-shaped input. Reductions over rows (dscale, dbias, scatter-adds)
// use a fixed accumulation order that does not depend on the thread count.
//
#include "kernels/Checks.h"
#include "kernels/cpu/FastMath.h"
#include "kernels/cpu/Dispatch.h"
#include "kernels/cpu/Gemm.h"
#include "kernels/cpu/GemmPacking.h"
#include "kernels/cpu/Kernel.h"
#include "kernels/cpu/RowSums.h"
#include "kernels/cpu/SoftmaxRows.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

namespace cpc::kernels {
namespace {

int nthreads(const KernelContext &ctx) { return std::max(1, ctx.threads); }

/// body(o, k0, k1) over tasks (o < outer, column block [k0, k1) of inner): enough tasks for the
/// threads even when outer is 1, each a fixed range, so per-element order is thread-independent.
template <typename F>
void forColumnBlocks(const KernelContext &ctx, int64_t outer, int64_t inner, int64_t work, F &&body) {
  int threads = nthreads(ctx);
  int64_t block = columnBlock(inner, outer, threads), blocks = (inner + block - 1) / block;
#pragma omp parallel for num_threads(threads) if (work > kParallelMin) schedule(static)
  for (int64_t task = 0; task < outer * blocks; ++task) {
    int64_t k0 = (task % blocks) * block;
    body(task / blocks, k0, std::min(inner, k0 + block));
  }
}

/// Indices as i64 with negatives wrapped into [0, size); fails on any outside [-size, size).
/// Indices into a dim of `size` elements held as this rank's block (indexBlock): wrapped and
/// checked against the global size, then made local (-1 outside the block).
std::vector<int64_t> readIndices(const KernelContext &ctx, const TensorRef &t, int64_t size) {
  std::vector<int64_t> v(t.numel());
  if (t.dtype == DType::I64)
    std::memcpy(v.data(), t.data, v.size() * sizeof(int64_t));
  else if (t.dtype == DType::I32)
    std::copy(t.as<int32_t>(), t.as<int32_t>() + v.size(), v.begin());
  else
    ctx.fail(std::string("indices must be i64 or i32, not ") + dtypeName(t.dtype));
  IndexBlock block = indexBlock(ctx, size);
  for (int64_t &i : v) {
    int64_t w = i < 0 ? i + block.global : i;
    if (w < 0 || w >= block.global)
      ctx.fail("index " + std::to_string(i) + " is out of range for a dim of size " + std::to_string(block.global));
    i = block.localIndex(w);
  }
  return v;
}

//===----------------------------------------------------------------------===//
// pad
//===----------------------------------------------------------------------===//

template <typename E>
void padTyped(const KernelContext &ctx, const TensorRef &in, const TensorRef &out, uint64_t bits,
              const std::vector<int64_t> &low, const std::vector<int64_t> &interior) {
  E fillValue;
  std::memcpy(&fillValue, &bits, sizeof(E));
  E *dst = out.as<E>();
  const E *src = in.as<E>();
  int64_t total = out.numel(), r = in.rank();
  int threads = nthreads(ctx);
  if (bits == 0) {
    std::memset(dst, 0, total * sizeof(E));
  } else {
#pragma omp parallel for num_threads(threads) if (total > kParallelMin) schedule(static)
    for (int64_t i = 0; i < total; ++i)
      dst[i] = fillValue;
  }
  if (in.numel() == 0)
    return;
  if (r == 0) {
    dst[0] = src[0];
    return;
  }
  std::vector<int64_t> ostride = rowMajorStrides(out.shape);
  int64_t len = in.shape[r - 1], rows = in.numel() / len, step = interior[r - 1] + 1;
#pragma omp parallel for num_threads(threads) if (in.numel() > kParallelMin) schedule(static)
  for (int64_t row = 0; row < rows; ++row) {
    int64_t off = low[r - 1];
    for (int64_t d = r - 2, rem = row; d >= 0; --d) {
      int64_t c = rem % in.shape[d];
      rem /= in.shape[d];
      off += (low[d] + c * (interior[d] + 1)) * ostride[d];
    }
    const E *s = src + row * len;
    E *o = dst + off;
    if (step == 1)
      std::memcpy(o, s, len * sizeof(E));
    else
      for (int64_t j = 0; j < len; ++j)
        o[j * step] = s[j];
  }
}

void padKernel(KernelContext &ctx) {
  uint64_t bits = checkPad(ctx);
  const TensorRef &in = ctx.inputs[0], &out = ctx.outputs[0];
  const auto &low = ctx.attrs.lowPadding, &interior = ctx.attrs.interiorPadding;
  switch (dtypeSize(in.dtype)) {
  case 1: return padTyped<uint8_t>(ctx, in, out, bits, low, interior);
  case 2: return padTyped<uint16_t>(ctx, in, out, bits, low, interior);
  case 4: return padTyped<uint32_t>(ctx, in, out, bits, low, interior);
  case 8: return padTyped<uint64_t>(ctx, in, out, bits, low, interior);
  default: ctx.fail(std::string("unsupported element type ") + dtypeName(in.dtype));
  }
}

//===----------------------------------------------------------------------===//
// gelu_grad, softmax_grad
//===----------------------------------------------------------------------===//

template <typename T> T geluErfGrad(T x) {
  const T invSqrt2 = T(0.70710678118654752440), invSqrt2Pi = T(0.39894228040143267794);
  T cdf = T(0.5) * (T(1) + fastErf(x * invSqrt2));
  return cdf + x * invSqrt2Pi * fastExp(T(-0.5) * x * x);
}

template <typename T> T geluTanhGrad(T x) {
  const T k = T(0.79788456080286535588), c = T(0.044715);
  T x2 = x * x, t = std::tanh(k * (x + c * x2 * x));
  return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * k * (T(1) + T(3) * c * x2);
}

void geluGradKernel(KernelContext &ctx) {
  checkGeluGrad(ctx);
  const TensorRef &x = ctx.inputs[0], &g = ctx.inputs[1], &out = ctx.outputs[0];
  bool tanhMode = ctx.attrs.approximate == GeluApproximation::Tanh;
  int64_t n = x.numel();
  int threads = nthreads(ctx);
  dispatchFloat(ctx, x.dtype, [&](auto zero) {
    using T = decltype(zero);
    const T *xp = x.as<T>(), *gp = g.as<T>();
    T *yp = out.as<T>();
    if (tanhMode) {
#pragma omp parallel for num_threads(threads) if (n > kParallelMin) schedule(static)
      for (int64_t i = 0; i < n; ++i)
        yp[i] = gp[i] * geluTanhGrad(xp[i]);
    } else {
#pragma omp parallel for num_threads(threads) if (n > kParallelMin) schedule(static)
      for (int64_t i = 0; i < n; ++i)
        yp[i] = gp[i] * geluErfGrad(xp[i]);
    }
  });
}

// Over [outer, len, inner]: out = y * (g - sum_len(g * y)), the sum in double.
template <typename T>
void softmaxGrad(const KernelContext &ctx, const T *y, const T *g, T *out, int64_t outer, int64_t len,
                 int64_t inner) {
  int threads = nthreads(ctx);
  int64_t total = outer * len * inner;
  constexpr int64_t kBlock = 256;
  if (inner == 1) { // rows: the sum in lanes
#pragma omp parallel for num_threads(threads) if (total > kParallelMin) schedule(static)
    for (int64_t o = 0; o < outer; ++o)
      softmaxGradRow(y + o * len, g + o * len, out + o * len, len, T(1));
    return;
  }
  int64_t block = std::min<int64_t>(kBlock, inner);
  int64_t blocks = (inner + block - 1) / block;
#pragma omp parallel for num_threads(threads) if (total > kParallelMin) schedule(static)
  for (int64_t task = 0; task < outer * blocks; ++task) {
    int64_t o = task / blocks, i0 = (task % blocks) * block, n = std::min(block, inner - i0);
    int64_t base = o * len * inner + i0;
    double sum[kBlock];
    for (int64_t i = 0; i < n; ++i)
      sum[i] = 0;
    for (int64_t j = 0; j < len; ++j)
      for (int64_t i = 0; i < n; ++i)
        sum[i] += double(g[base + j * inner + i]) * double(y[base + j * inner + i]);
    T s[kBlock];
    for (int64_t i = 0; i < n; ++i)
      s[i] = T(sum[i]);
    for (int64_t j = 0; j < len; ++j)
      for (int64_t i = 0; i < n; ++i) {
        int64_t e = base + j * inner + i;
        out[e] = y[e] * (g[e] - s[i]);
      }
  }
}

void softmaxGradKernel(KernelContext &ctx) {
  int64_t axis = checkSoftmaxGrad(ctx);
  const TensorRef &y = ctx.inputs[0], &g = ctx.inputs[1], &out = ctx.outputs[0];
  int64_t outer = numElements({y.shape.begin(), y.shape.begin() + axis}), len = y.shape[axis];
  int64_t inner = numElements({y.shape.begin() + axis + 1, y.shape.end()});
  if (outer * len * inner == 0)
    return;
  dispatchFloat(ctx, y.dtype, [&](auto zero) {
    using T = decltype(zero);
    softmaxGrad<T>(ctx, y.as<T>(), g.as<T>(), out.as<T>(), outer, len, inner);
  });
}

//===----------------------------------------------------------------------===//
// layer_norm_grad
//===----------------------------------------------------------------------===//

/// Rows per block of layerNormGrad's partial sums (a function of the row count only).
int64_t layerNormGradBlockRows(int64_t rows) { return std::max<int64_t>(8, (rows + 255) / 256); }

// Rows are split into fixed blocks (a function of the row count only); each block sums its
// rows' dscale/dbias contributions in row order, and blocks are combined in block order.
// With `addend` (cpc.layer_norm_grad_add), dx is the input gradient rounded in T plus the
// addend, rounded again: layer_norm_grad then cpc.add, in one pass.
template <typename T>
void layerNormGrad(const KernelContext &ctx, const T *x, const T *scale, const T *g, T *dx, T *dscale,
                   T *dbias, int64_t rows, int64_t n, double eps, const T *addend = nullptr) {
  int threads = nthreads(ctx);
  int64_t blockRows = layerNormGradBlockRows(rows);
  int64_t blocks = (rows + blockRows - 1) / blockRows;
  std::vector<double> partial(2 * blocks * n, 0.0); // [block][dscale n | dbias n]
#pragma omp parallel for num_threads(threads) if (rows * n > kParallelMin) schedule(dynamic, 1)
  for (int64_t b = 0; b < blocks; ++b) {
    double *ps = partial.data() + 2 * b * n, *pb = ps + n;
    for (int64_t row = b * blockRows; row < std::min(rows, (b + 1) * blockRows); ++row) {
      const T *xr = x + row * n, *gr = g + row * n;
      double mean = laneSum(n, [&](int64_t j) { return double(xr[j]); }) / double(n);
      double sq = laneSum(n, [&](int64_t j) {
        double d = double(xr[j]) - mean;
        return d * d;
      });
      double rstd = 1.0 / std::sqrt(sq / double(n) + eps);
      double sumGs, sumGsX;
      laneSum2(n, [&](int64_t j, double &gs, double &gsx) {
        gs = double(gr[j]) * double(scale[j]);
        gsx = gs * ((double(xr[j]) - mean) * rstd);
      }, sumGs, sumGsX);
      for (int64_t j = 0; j < n; ++j) {
        double xhat = (double(xr[j]) - mean) * rstd, gj = gr[j];
        ps[j] += gj * xhat;
        pb[j] += gj;
      }
      double a = sumGs / double(n), c = sumGsX / double(n);
      T *dr = dx + row * n; // may alias x or g: position j is read above/here before written
      for (int64_t j = 0; j < n; ++j) {
        double xhat = (double(xr[j]) - mean) * rstd;
        dr[j] = T(rstd * (double(gr[j]) * double(scale[j]) - a - xhat * c));
      }
      if (addend)
        for (int64_t j = 0; j < n; ++j)
          dr[j] += addend[row * n + j];
    }
  }
#pragma omp parallel for num_threads(threads) if (blocks * n > kParallelMin) schedule(static)
  for (int64_t j = 0; j < n; ++j) {
    double s = 0, t = 0;
    for (int64_t b = 0; b < blocks; ++b) {
      s += partial[2 * b * n + j];
      t += partial[(2 * b + 1) * n + j];
    }
    dscale[j] = T(s);
    dbias[j] = T(t);
  }
}

/// layer_norm_grad's partial sums: two doubles per column and block of rows.
template <bool WithAddend> KernelWorkspace layerNormGradWorkspace(const KernelContext &ctx) {
  int64_t axis = WithAddend ? checkLayerNormGradAdd(ctx) : checkLayerNormGrad(ctx);
  const TensorRef &x = ctx.inputs[0];
  int64_t n = numElements({x.shape.begin() + axis, x.shape.end()}), rows = n ? x.numel() / n : 0;
  int64_t blockRows = layerNormGradBlockRows(rows);
  KernelWorkspace w;
  w.heapBytes = 2 * ((rows + blockRows - 1) / blockRows) * n * (int64_t)sizeof(double);
  return w;
}

/// cpc.layer_norm_grad, or cpc.layer_norm_grad_add (WithAddend: a 4th input added to dx).
template <bool WithAddend> void layerNormGradKernel(KernelContext &ctx) {
  int64_t axis = WithAddend ? checkLayerNormGradAdd(ctx) : checkLayerNormGrad(ctx);
  const TensorRef &x = ctx.inputs[0], &scale = ctx.inputs[1], &g = ctx.inputs[2];
  double eps = ctx.attrs.epsilon;
  int64_t n = numElements({x.shape.begin() + axis, x.shape.end()}), rows = n ? x.numel() / n : 0;
  dispatchFloat(ctx, x.dtype, [&](auto zero) {
    using T = decltype(zero);
    if (n == 0)
      return;
    layerNormGrad<T>(ctx, x.as<T>(), scale.as<T>(), g.as<T>(), ctx.outputs[0].as<T>(), ctx.outputs[1].as<T>(),
                     ctx.outputs[2].as<T>(), rows, n, eps, WithAddend ? ctx.inputs[3].as<T>() : nullptr);
  });
}

//===----------------------------------------------------------------------===//
// gather_grad, gather_elements_grad
//===----------------------------------------------------------------------===//

// out[o, idx[i], k] += grad[o, i, k]. Tasks are (o, column block): each owns disjoint output
// elements and adds the gathered rows in index order, so duplicates accumulate deterministically.
void gatherGradKernel(KernelContext &ctx) {
  int64_t axis = checkGatherGrad(ctx);
  const TensorRef &grad = ctx.inputs[0], &indices = ctx.inputs[1], &out = ctx.outputs[0];
  int64_t size = out.shape[axis];
  std::vector<int64_t> idx = readIndices(ctx, indices, size);
  int64_t outer = numElements({out.shape.begin(), out.shape.begin() + axis});
  int64_t inner = numElements({out.shape.begin() + axis + 1, out.shape.end()});
  int64_t n = (int64_t)idx.size();
  dispatchFloat(ctx, out.dtype, [&](auto zero) {
    using T = decltype(zero);
    T *dst = out.as<T>();
    const T *src = grad.as<T>();
    std::fill(dst, dst + out.numel(), T(0));
    if (grad.numel() == 0)
      return;
    forColumnBlocks(ctx, outer, inner, grad.numel(), [&](int64_t o, int64_t k0, int64_t k1) {
      for (int64_t i = 0; i < n; ++i) {
        if (idx[i] < 0) // outside this rank's block
          continue;
        const T *s = src + (o * n + i) * inner;
        T *d = dst + (o * size + idx[i]) * inner;
        for (int64_t k = k0; k < k1; ++k)
          d[k] += s[k];
      }
    });
  });
}

// out[coords with axis -> indices[e]] += grad[e]. Elements differing in a non-axis coordinate
// never collide, so tasks over (outer, inner block) are race-free; each walks the axis in order.
void gatherElementsGradKernel(KernelContext &ctx) {
  int64_t axis = checkGatherElementsGrad(ctx);
  const TensorRef &grad = ctx.inputs[0], &indices = ctx.inputs[1], &out = ctx.outputs[0];
  int64_t r = out.rank();
  std::vector<int64_t> idx = readIndices(ctx, indices, out.shape[axis]);
  std::vector<int64_t> ostride = rowMajorStrides(out.shape);
  const auto &is = indices.shape;
  int64_t outer = numElements({is.begin(), is.begin() + axis}), len = is[axis];
  int64_t inner = numElements({is.begin() + axis + 1, is.end()});
  // Output offsets of the index positions before / after the axis.
  std::vector<int64_t> outerOff = positionOffsets(is, ostride, 0, axis);
  std::vector<int64_t> innerOff = positionOffsets(is, ostride, axis + 1, r);
  dispatchFloat(ctx, out.dtype, [&](auto zero) {
    using T = decltype(zero);
    T *dst = out.as<T>();
    const T *src = grad.as<T>();
    std::fill(dst, dst + out.numel(), T(0));
    if (grad.numel() == 0)
      return;
    forColumnBlocks(ctx, outer, inner, grad.numel(), [&](int64_t o, int64_t k0, int64_t k1) {
      for (int64_t j = 0; j < len; ++j) {
        int64_t e0 = (o * len + j) * inner;
        for (int64_t k = k0; k < k1; ++k)
          if (idx[e0 + k] >= 0) // inside this rank's block
            dst[outerOff[o] + idx[e0 + k] * ostride[axis] + innerOff[k]] += src[e0 + k];
      }
    });
  });
}

//===----------------------------------------------------------------------===//
// conv2d_grad_input, conv2d_grad_weight
//===----------------------------------------------------------------------===//

struct ConvGeom {
  int64_t N, C, H, W, O, KH, KW, OH, OW, G;
  int64_t sh, sw, pt, pl, dh, dw;
  bool direct, patches; // 1x1/stride 1/no padding; stride == kernel, no padding, dilation 1
};

/// Geometry of conv2d(x: xs, w: ws) -> ys, checked against the attributes.
ConvGeom convGeom(const KernelContext &ctx, const std::vector<int64_t> &xs, const std::vector<int64_t> &ws,
                  const std::vector<int64_t> &ys) {
  if (xs.size() != 4 || ws.size() != 4 || ys.size() != 4)
    ctx.fail("expects NCHW input, OIHW weight and an NCHW gradient");
  const auto &st = ctx.attrs.strides, &pad = ctx.attrs.padding, &dil = ctx.attrs.dilations;
  int64_t groups = ctx.attrs.groups;
  if (st.size() != 2 || pad.size() != 4 || dil.size() != 2)
    ctx.fail("strides/dilations need 2 values and padding 4");
  ConvGeom g{xs[0], xs[1], xs[2], xs[3], ws[0], ws[2], ws[3], ys[2], ys[3], groups,
             st[0], st[1], pad[0], pad[1], dil[0], dil[1], false, false};
  if (g.sh < 1 || g.sw < 1 || g.dh < 1 || g.dw < 1)
    ctx.fail("strides and dilations must be >= 1");
  if (g.G < 1 || g.C % g.G || g.O % g.G || ws[1] != g.C / g.G)
    ctx.fail("weight " + shapeString(ws) + " does not fit input " + shapeString(xs) + " with groups=" +
             std::to_string(g.G));
  int64_t oh = (g.H + pad[0] + pad[2] - g.dh * (g.KH - 1) - 1) / g.sh + 1;
  int64_t ow = (g.W + pad[1] + pad[3] - g.dw * (g.KW - 1) - 1) / g.sw + 1;
  if (ys[0] != g.N || ys[1] != g.O || g.OH != oh || g.OW != ow)
    ctx.fail("gradient " + shapeString(ys) + " is not the conv output shape for input " + shapeString(xs) +
             " and weight " + shapeString(ws));
  bool noPad = pad[0] == 0 && pad[1] == 0 && pad[2] == 0 && pad[3] == 0;
  g.direct = g.KH == 1 && g.KW == 1 && g.sh == 1 && g.sw == 1 && g.dh == 1 && g.dw == 1 && noPad;
  g.patches = !g.direct && g.sh == g.KH && g.sw == g.KW && g.dh == 1 && g.dw == 1 && noPad;
  return g;
}

/// ToCol (im2col): col[(c,kh,kw), (oh,ow)] = in[c, ih, iw], zero outside the input. Otherwise
/// its adjoint (col2im): in[c, ih, iw] += col[...]. One task per channel, whose rows overlap.
template <bool ToCol, typename T>
void imageCols(const ConvGeom &g, std::conditional_t<ToCol, const T, T> *in, int64_t Cg,
               std::conditional_t<ToCol, T, const T> *col, int threads) {
  int64_t P = g.OH * g.OW;
#pragma omp parallel for num_threads(threads) if (Cg * g.KH * g.KW * P > (1 << 16)) schedule(static)
  for (int64_t c = 0; c < Cg; ++c)
    for (int64_t kh = 0; kh < g.KH; ++kh)
      for (int64_t kw = 0; kw < g.KW; ++kw) {
        auto *cr = col + ((c * g.KH + kh) * g.KW + kw) * P;
        for (int64_t oh = 0; oh < g.OH; ++oh) {
          int64_t ih = oh * g.sh - g.pt + kh * g.dh;
          bool inside = ih >= 0 && ih < g.H;
          auto *row = in + (c * g.H + (inside ? ih : 0)) * g.W;
          for (int64_t ow = 0, iw = kw * g.dw - g.pl; ow < g.OW; ++ow, iw += g.sw) {
            bool ok = inside && iw >= 0 && iw < g.W;
            if constexpr (ToCol)
              cr[oh * g.OW + ow] = ok ? row[iw] : T(0);
            else if (ok)
              row[iw] += cr[oh * g.OW + ow];
          }
        }
      }
}

/// Patch embedding (stride == kernel, no padding): patches tile the image without overlap, so
/// im2col and its adjoint are pure reshuffles. toCol: in -> col; otherwise col -> in (assign).
template <typename T>
void patchShuffle(const ConvGeom &g, T *in, int64_t Cg, T *col, bool toCol, int threads) {
  int64_t rows = Cg * g.KH * g.KW, P = g.OH * g.OW;
#pragma omp parallel for num_threads(threads) if (rows * P > (1 << 16)) schedule(static)
  for (int64_t row = 0; row < rows; ++row) {
    int64_t kw = row % g.KW, kh = (row / g.KW) % g.KH, c = row / (g.KW * g.KH);
    T *d = col + row * P;
    for (int64_t oh = 0; oh < g.OH; ++oh) {
      T *s = in + (c * g.H + oh * g.KH + kh) * g.W + kw;
      if (toCol)
        for (int64_t ow = 0; ow < g.OW; ++ow)
          d[oh * g.OW + ow] = s[ow * g.KW];
      else
        for (int64_t ow = 0; ow < g.OW; ++ow)
          s[ow * g.KW] = d[oh * g.OW + ow];
    }
  }
}

// dW_g[Og, Kc] = sum_n dy[n,g][Og, P] * col(x[n,g])^T[P, Kc].
template <typename T> void convGradWeight(KernelContext &ctx) {
  const TensorRef &x = ctx.inputs[0], &dy = ctx.inputs[1], &dw = ctx.outputs[0];
  ConvGeom g = convGeom(ctx, x.shape, dw.shape, dy.shape);
  T *DW = dw.as<T>();
  std::fill(DW, DW + dw.numel(), T(0));
  int64_t Cg = g.C / g.G, Og = g.O / g.G, Kc = Cg * g.KH * g.KW, P = g.OH * g.OW;
  if (dw.numel() == 0 || g.N == 0 || P == 0)
    return;
  int threads = nthreads(ctx);
  std::vector<T> col(g.direct ? 0 : Kc * P);
  const T *X = x.as<T>(), *DY = dy.as<T>();
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t gi = 0; gi < g.G; ++gi) {
      const T *in = X + (n * g.C + gi * Cg) * g.H * g.W;
      const T *B = in; // 1x1, stride 1: the image is its own [Cg, H*W] column matrix
      if (!g.direct) {
        if (g.patches)
          patchShuffle(g, const_cast<T *>(in), Cg, col.data(), true, threads);
        else
          imageCols<true, T>(g, in, Cg, col.data(), threads);
        B = col.data();
      }
      gemm(Gemm<T>{false, true, Og, Kc, P, DY + (n * g.O + gi * Og) * P, P, B, P, T(1), DW + gi * Og * Kc, Kc},
           threads);
    }
}

// col[Kc, P] = W_g^T[Kc, Og] * dy[n,g][Og, P]; dx[n,g] = col2im(col).
template <typename T> void convGradInput(KernelContext &ctx) {
  const TensorRef &dy = ctx.inputs[0], &w = ctx.inputs[1], &dx = ctx.outputs[0];
  ConvGeom g = convGeom(ctx, dx.shape, w.shape, dy.shape);
  T *DX = dx.as<T>();
  std::fill(DX, DX + dx.numel(), T(0));
  int64_t Cg = g.C / g.G, Og = g.O / g.G, Kc = Cg * g.KH * g.KW, P = g.OH * g.OW;
  if (dx.numel() == 0 || Og == 0 || P == 0)
    return;
  int threads = nthreads(ctx);
  std::vector<T> col(g.direct ? 0 : Kc * P);
  const T *Wt = w.as<T>(), *DY = dy.as<T>();
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t gi = 0; gi < g.G; ++gi) {
      T *out = DX + (n * g.C + gi * Cg) * g.H * g.W;
      const T *A = Wt + gi * Og * Kc, *B = DY + (n * g.O + gi * Og) * P;
      if (g.direct) {
        gemm(Gemm<T>{true, false, Kc, P, Og, A, Kc, B, P, T(0), out, P}, threads);
        continue;
      }
      gemm(Gemm<T>{true, false, Kc, P, Og, A, Kc, B, P, T(0), col.data(), P}, threads);
      if (g.patches)
        patchShuffle(g, out, Cg, col.data(), false, threads);
      else
        imageCols<false, T>(g, out, Cg, col.data(), threads);
    }
}

/// A convolution gradient's column matrix and its GEMMs' packing (one image and group at a time).
template <bool Weight> KernelWorkspace convGradWorkspace(const KernelContext &ctx) {
  checkArity(ctx, 2, 1);
  const TensorRef &out = ctx.outputs[0];
  ConvGeom g = Weight ? convGeom(ctx, ctx.inputs[0].shape, out.shape, ctx.inputs[1].shape)
                      : convGeom(ctx, out.shape, ctx.inputs[1].shape, ctx.inputs[0].shape);
  int64_t Cg = g.C / g.G, Og = g.O / g.G, Kc = Cg * g.KH * g.KW, P = g.OH * g.OW;
  bool isDouble = out.dtype == DType::F64;
  KernelWorkspace w = Weight ? gemmPacking(Og, Kc, P, isDouble) : gemmPacking(Kc, P, Og, isDouble);
  w.heapBytes = g.direct ? 0 : Kc * P * (isDouble ? 8 : 4);
  return w;
}

template <bool Weight> void convGradKernel(KernelContext &ctx) {
  checkArity(ctx, 2, 1);
  DType t = ctx.inputs[0].dtype;
  if (ctx.inputs[1].dtype != t || ctx.outputs[0].dtype != t)
    ctx.fail("operand and result element types differ");
  dispatchFloat(ctx, t, [&](auto zero) {
    using T = decltype(zero);
    if constexpr (Weight)
      convGradWeight<T>(ctx);
    else
      convGradInput<T>(ctx);
  });
}

} // namespace

void registerBackwardKernels(KernelRegistry &r) {
  r.add(OpKind::Pad, padKernel, Storage16::Native); // moves bytes
  r.add(OpKind::GeluGrad, geluGradKernel, Storage16::Elementwise);
  r.add(OpKind::SoftmaxGrad, softmaxGradKernel);
  r.add(OpKind::LayerNormGrad, layerNormGradKernel<false>);
  r.add(OpKind::LayerNormGradAdd, layerNormGradKernel<true>);
  r.add(OpKind::GatherGrad, gatherGradKernel);
  r.add(OpKind::GatherElementsGrad, gatherElementsGradKernel);
  r.add(OpKind::Conv2DGradInput, convGradKernel<false>);
  r.add(OpKind::Conv2DGradWeight, convGradKernel<true>);
  r.setWorkspace(OpKind::LayerNormGrad, layerNormGradWorkspace<false>);
  r.setWorkspace(OpKind::LayerNormGradAdd, layerNormGradWorkspace<true>);
  r.setWorkspace(OpKind::Conv2DGradInput, convGradWorkspace<false>);
  r.setWorkspace(OpKind::Conv2DGradWeight, convGradWorkspace<true>);
}

} // namespace cpc::kernels
