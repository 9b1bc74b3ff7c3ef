//===- Linalg.cpp - matmul and conv2d on top of OpenBLAS ------------------===//
#include "kernels/Checks.h"
#include "kernels/cpu/Gemm.h"
#include "kernels/cpu/GemmPacking.h"
#include "kernels/cpu/Kernel.h"
#include "kernels/Float16.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace cpc::kernels {
namespace {

//===----------------------------------------------------------------------===//
// matmul
//===----------------------------------------------------------------------===//

/// A matmul's GEMMs: C[b] = op(A)[aOff] op(B)[bOff] for every result batch b (batch dims
/// broadcast, numpy rules), each M x N over K. Operands stored transposed ([.., K, M] /
/// [.., N, K]) are read transposed.
struct MatmulGeometry {
  int64_t M = 0, N = 0, K = 0, lda = 0, ldb = 0;
  bool tA = false, tB = false;
  std::vector<std::pair<int64_t, int64_t>> batches; // (A offset, B offset) per result batch, in elements
  bool flat = false; // x[B,S,K] @ W[K,N]: the lhs batches are contiguous rows, one GEMM of all rows
};

MatmulGeometry matmulGeometry(const KernelContext &ctx) {
  MatmulShape s = checkMatmul(ctx);
  MatmulGeometry g;
  g.tA = ctx.attrs.transposeLhs;
  g.tB = ctx.attrs.transposeRhs;
  g.M = s.M, g.N = s.N, g.K = s.K;
  const std::vector<int64_t> &aBatch = s.lhsBatch, &bBatch = s.rhsBatch, &batch = s.batch;
  size_t rank = batch.size();
  int64_t nBatch = numElements(batch);
  g.lda = g.tA ? g.M : g.K;
  g.ldb = g.tB ? g.K : g.N;
  if (numElements(bBatch) == 1 && numElements(aBatch) == nBatch && !g.tA) {
    g.flat = true;
    g.batches = {{0, 0}};
    g.M *= nBatch;
    return g;
  }
  // Element strides of each operand's batch dims (0 where broadcast).
  std::vector<int64_t> aStride(rank, 0), bStride(rank, 0);
  for (int64_t i = (int64_t)rank - 1, sa = g.M * g.K, sb = g.K * g.N; i >= 0; --i) {
    aStride[i] = aBatch[i] == 1 ? 0 : sa;
    bStride[i] = bBatch[i] == 1 ? 0 : sb;
    sa *= aBatch[i];
    sb *= bBatch[i];
  }
  for (int64_t bi = 0; bi < nBatch; ++bi) {
    int64_t aOff = 0, bOff = 0;
    for (int64_t i = (int64_t)rank - 1, r = bi; i >= 0; --i) {
      int64_t c = r % batch[i];
      r /= batch[i];
      aOff += c * aStride[i];
      bOff += c * bStride[i];
    }
    g.batches.push_back({aOff, bOff});
  }
  return g;
}

template <typename T> void matmulTyped(KernelContext &ctx, const MatmulGeometry &g) {
  T *C = ctx.outputs[0].as<T>();
  const T *A = ctx.inputs[0].as<T>(), *B = ctx.inputs[1].as<T>();
  std::vector<Gemm<T>> gemms;
  gemms.reserve(g.batches.size());
  for (size_t bi = 0; bi < g.batches.size(); ++bi)
    gemms.push_back(Gemm<T>{g.tA, g.tB, g.M, g.N, g.K, A + g.batches[bi].first, g.lda, B + g.batches[bi].second,
                            g.ldb, T(0), C + bi * g.M * g.N, g.N});
  gemmBatch(gemms, ctx.threads);
}

// 16-bit operands: no bf16/f16 GEMM in Debian's OpenBLAS (nor AVX-512 BF16 here), so the
// operands go through f32 in panels: each batch's rhs widened once (a Linear's weight: once per
// call), the lhs and the result about kMatmulPanel rows at a time; f32 accumulation, one rounding.
// The panels are blocks the f32 GEMM may be cut into (gemmRowPanels), so the result is, bit for
// bit, the f32 matmul of the widened operands, rounded once.
constexpr int64_t kMatmulPanel = 128;

/// Rows of the largest of `panels` (row bounds).
int64_t largestPanel(const std::vector<int64_t> &panels) {
  int64_t rows = 0;
  for (size_t i = 1; i < panels.size(); ++i)
    rows = std::max(rows, panels[i] - panels[i - 1]);
  return rows;
}

/// Floats of scratch for the widened rhs and the largest of `panels`' lhs and result panels.
int64_t matmulScratchFloats(const MatmulGeometry &g, const std::vector<int64_t> &panels) {
  return g.K * g.N + largestPanel(panels) * (g.K + g.N);
}

void matmul16(KernelContext &ctx, const MatmulGeometry &g) {
  DType t = ctx.outputs[0].dtype;
  const uint16_t *A = ctx.inputs[0].as<uint16_t>(), *B = ctx.inputs[1].as<uint16_t>();
  uint16_t *C = ctx.outputs[0].as<uint16_t>();
  std::vector<int64_t> panels = gemmRowPanels(g.M, g.N, g.K, kMatmulPanel);
  float *wideB = scratch16(matmulScratchFloats(g, panels));
  float *panelA = wideB + g.K * g.N;
  int64_t widenedB = -1;
  for (size_t bi = 0; bi < g.batches.size(); ++bi) {
    auto [aOff, bOff] = g.batches[bi];
    if (bOff != widenedB) { // a stored [K, N] (or [N, K]) block is contiguous either way
      widenToFloat(t, B + bOff, wideB, g.K * g.N);
      widenedB = bOff;
    }
    for (size_t p = 0; p + 1 < panels.size(); ++p) {
      int64_t m0 = panels[p], rows = panels[p + 1] - m0;
      float *panelC = panelA + rows * g.K;
      int64_t lda = g.K;
      if (!g.tA) {
        widenToFloat(t, A + aOff + m0 * g.K, panelA, rows * g.K);
      } else { // stored [K, M]: the panel's columns of each stored row, kept [K, rows]
        for (int64_t k = 0; k < g.K; ++k)
          widenToFloat(t, A + aOff + k * g.M + m0, panelA + k * rows, rows);
        lda = rows;
      }
      gemm(Gemm<float>{g.tA, g.tB, rows, g.N, g.K, panelA, lda, wideB, g.ldb, 0.0f, panelC, g.N}, ctx.threads);
      narrowFromFloat(t, panelC, C + bi * g.M * g.N + m0 * g.N, rows * g.N);
    }
  }
}

void matmulKernel(KernelContext &ctx) {
  if (ctx.inputs.size() != 2 || ctx.outputs.size() != 1)
    ctx.fail("expects 2 inputs and 1 output");
  DType t = ctx.inputs[0].dtype;
  if (ctx.inputs[1].dtype != t || ctx.outputs[0].dtype != t)
    ctx.fail("operand and result element types differ");
  if (t != DType::F32 && t != DType::F64 && !is16BitFloat(t))
    ctx.fail(std::string("unsupported element type ") + dtypeName(t));
  MatmulGeometry g = matmulGeometry(ctx);
  if (ctx.outputs[0].numel() == 0)
    return;
  if (g.K == 0) {
    std::memset(ctx.outputs[0].data, 0, ctx.outputs[0].bytes()); // +0.0 in every float type
    return;
  }
  if (t == DType::F32)
    return matmulTyped<float>(ctx, g);
  if (t == DType::F64)
    return matmulTyped<double>(ctx, g);
  matmul16(ctx, g);
}

int64_t matmulScratch(const KernelContext &ctx) {
  if (ctx.inputs.size() != 2 || ctx.outputs.size() != 1 || !is16BitFloat(ctx.outputs[0].dtype))
    return 0;
  MatmulGeometry g = matmulGeometry(ctx);
  return matmulScratchFloats(g, gemmRowPanels(g.M, g.N, g.K, kMatmulPanel));
}

/// The packing of matmul's GEMMs: whole batches in f32 and f64, 16-bit operands a panel at a time.
KernelWorkspace matmulWorkspace(const KernelContext &ctx) {
  if (ctx.inputs.size() != 2 || ctx.outputs.size() != 1)
    return {};
  MatmulGeometry g = matmulGeometry(ctx);
  DType t = ctx.outputs[0].dtype;
  if (!is16BitFloat(t))
    return gemmPacking(g.M, g.N, g.K, t == DType::F64);
  return gemmPacking(largestPanel(gemmRowPanels(g.M, g.N, g.K, kMatmulPanel)), g.N, g.K, false);
}

//===----------------------------------------------------------------------===//
// conv2d
//===----------------------------------------------------------------------===//

struct ConvGeom {
  int64_t N, C, H, W, O, KH, KW, OH, OW, G;
  int64_t sh, sw, pt, pl, dh, dw;
};

/// General im2col for one image and one group: col[(c,kh,kw), (oh,ow)], zero outside the input.
template <typename T>
void im2col(const ConvGeom &g, const T *in, int64_t Cg, T *col, int threads) {
  int64_t rows = Cg * g.KH * g.KW, P = g.OH * g.OW;
#pragma omp parallel for num_threads(threads) if (rows * P > (1 << 16)) schedule(static)
  for (int64_t row = 0; row < rows; ++row) {
    int64_t kw = row % g.KW, kh = (row / g.KW) % g.KH, c = row / (g.KW * g.KH);
    const T *plane = in + c * g.H * g.W;
    T *dst = col + row * P;
    for (int64_t oh = 0; oh < g.OH; ++oh) {
      int64_t ih = oh * g.sh - g.pt + kh * g.dh;
      T *d = dst + oh * g.OW;
      if (ih < 0 || ih >= g.H) {
        std::fill(d, d + g.OW, T(0));
        continue;
      }
      const T *srow = plane + ih * g.W;
      int64_t iw0 = kw * g.dw - g.pl;
      for (int64_t ow = 0; ow < g.OW; ++ow) {
        int64_t iw = iw0 + ow * g.sw;
        d[ow] = (iw >= 0 && iw < g.W) ? srow[iw] : T(0);
      }
    }
  }
}

/// stride == kernel, no padding, dilation 1 (patch embedding): patches tile the image without
/// overlap or bounds checks, so im2col is a pure reshuffle of [c, oh, kh, ow, kw].
template <typename T>
void patchesToCol(const ConvGeom &g, const T *in, int64_t Cg, T *col, int threads) {
  int64_t rows = Cg * g.KH * g.KW, P = g.OH * g.OW;
#pragma omp parallel for num_threads(threads) if (rows * P > (1 << 16)) schedule(static)
  for (int64_t row = 0; row < rows; ++row) {
    int64_t kw = row % g.KW, kh = (row / g.KW) % g.KH, c = row / (g.KW * g.KH);
    T *dst = col + row * P;
    for (int64_t oh = 0; oh < g.OH; ++oh) {
      const T *s = in + (c * g.H + oh * g.KH + kh) * g.W + kw;
      for (int64_t ow = 0; ow < g.OW; ++ow)
        dst[oh * g.OW + ow] = s[ow * g.KW];
    }
  }
}

template <typename T> void conv2dTyped(KernelContext &ctx) {
  const TensorRef &x = ctx.inputs[0], &w = ctx.inputs[1];
  const TensorRef *bias = ctx.inputs.size() > 2 ? &ctx.inputs[2] : nullptr;
  TensorRef &out = ctx.outputs[0];
  if (x.rank() != 4 || w.rank() != 4 || out.rank() != 4)
    ctx.fail("expects NCHW input, OIHW weight and an NCHW result");
  const std::vector<int64_t> &strides = ctx.attrs.strides, &pad = ctx.attrs.padding, &dil = ctx.attrs.dilations;
  int64_t groups = ctx.attrs.groups;
  if (strides.size() != 2 || pad.size() != 4 || dil.size() != 2)
    ctx.fail("strides/dilations need 2 values and padding 4");
  ConvGeom g{x.shape[0], x.shape[1], x.shape[2], x.shape[3], w.shape[0], w.shape[2], w.shape[3],
             out.shape[2], out.shape[3], groups, strides[0], strides[1], pad[0], pad[1], dil[0], dil[1]};
  if (g.G < 1 || g.C % g.G || g.O % g.G || w.shape[1] != g.C / g.G)
    ctx.fail("weight " + shapeString(w.shape) + " does not fit input " + shapeString(x.shape) +
             " with groups=" + std::to_string(g.G));
  int64_t expectOH = (g.H + pad[0] + pad[2] - g.dh * (g.KH - 1) - 1) / g.sh + 1;
  int64_t expectOW = (g.W + pad[1] + pad[3] - g.dw * (g.KW - 1) - 1) / g.sw + 1;
  if (out.shape[0] != g.N || out.shape[1] != g.O || g.OH != expectOH || g.OW != expectOW)
    ctx.fail("result " + shapeString(out.shape) + " does not match the convolution");
  if (bias && bias->numel() != g.O)
    ctx.fail("bias must have " + std::to_string(g.O) + " elements");
  if (out.numel() == 0)
    return;

  int64_t Cg = g.C / g.G, Og = g.O / g.G, Kc = Cg * g.KH * g.KW, P = g.OH * g.OW;
  bool direct = g.KH == 1 && g.KW == 1 && g.sh == 1 && g.sw == 1 && g.dh == 1 && g.dw == 1 &&
                pad[0] == 0 && pad[1] == 0 && pad[2] == 0 && pad[3] == 0;
  bool patches = !direct && g.sh == g.KH && g.sw == g.KW && g.dh == 1 && g.dw == 1 && pad[0] == 0 &&
                 pad[1] == 0 && pad[2] == 0 && pad[3] == 0;
  std::vector<T> col(direct || Kc * P == 0 ? 0 : Kc * P);
  const T *X = x.as<T>(), *Wt = w.as<T>();
  T *Y = out.as<T>();
  for (int64_t n = 0; n < g.N; ++n) {
    for (int64_t gi = 0; gi < g.G; ++gi) {
      const T *in = X + (n * g.C + gi * Cg) * g.H * g.W;
      T *y = Y + (n * g.O + gi * Og) * P;
      if (Kc == 0) {
        std::fill(y, y + Og * P, T(0));
        continue;
      }
      const T *B = in; // 1x1, stride 1: the image itself is the [C, H*W] column matrix
      if (!direct) {
        if (patches)
          patchesToCol(g, in, Cg, col.data(), ctx.threads);
        else
          im2col(g, in, Cg, col.data(), ctx.threads);
        B = col.data();
      }
      gemm(Gemm<T>{false, false, Og, P, Kc, Wt + gi * Og * Kc, Kc, B, P, T(0), y, P}, ctx.threads);
    }
  }
  if (bias) {
    const T *bv = bias->as<T>();
#pragma omp parallel for num_threads(ctx.threads) if (out.numel() > (1 << 16)) schedule(static)
    for (int64_t r = 0; r < g.N * g.O; ++r) {
      T b = bv[r % g.O];
      T *y = Y + r * P;
      for (int64_t p = 0; p < P; ++p)
        y[p] += b;
    }
  }
}

void conv2dKernel(KernelContext &ctx) {
  if (ctx.inputs.size() < 2 || ctx.inputs.size() > 3 || ctx.outputs.size() != 1)
    ctx.fail("expects input, weight, optional bias and 1 output");
  DType t = ctx.inputs[0].dtype;
  for (auto &in : ctx.inputs)
    if (in.dtype != t)
      ctx.fail("operand element types differ");
  if (ctx.outputs[0].dtype != t)
    ctx.fail("result element type differs from the operands");
  if (t == DType::F32)
    return conv2dTyped<float>(ctx);
  if (t == DType::F64)
    return conv2dTyped<double>(ctx);
  ctx.fail(std::string("unsupported element type ") + dtypeName(t));
}

/// The column matrix of one image and group (none for 1x1, stride 1, unpadded) and its GEMM.
KernelWorkspace conv2dWorkspace(const KernelContext &ctx) {
  if (ctx.inputs.size() < 2 || ctx.outputs.size() != 1 || ctx.inputs[0].rank() != 4 || ctx.inputs[1].rank() != 4 ||
      ctx.outputs[0].rank() != 4)
    return {};
  const std::vector<int64_t> &w = ctx.inputs[1].shape, &y = ctx.outputs[0].shape;
  const std::vector<int64_t> &strides = ctx.attrs.strides, &pad = ctx.attrs.padding, &dil = ctx.attrs.dilations;
  int64_t groups = std::max<int64_t>(ctx.attrs.groups, 1), Kc = w[1] * w[2] * w[3], P = y[2] * y[3];
  auto all = [](const std::vector<int64_t> &v, int64_t value) {
    return std::all_of(v.begin(), v.end(), [&](int64_t e) { return e == value; });
  };
  bool direct = w[2] == 1 && w[3] == 1 && all(strides, 1) && all(dil, 1) && all(pad, 0);
  bool isDouble = ctx.outputs[0].dtype == DType::F64;
  KernelWorkspace ws = gemmPacking(w[0] / groups, P, Kc, isDouble);
  ws.heapBytes = direct ? 0 : Kc * P * (isDouble ? 8 : 4);
  return ws;
}

} // namespace

void registerLinalgKernels(KernelRegistry &registry) {
  registry.add(OpKind::MatMul, matmulKernel, Storage16::Native, matmulScratch);
  registry.add(OpKind::Conv2D, conv2dKernel);
  registry.setWorkspace(OpKind::MatMul, matmulWorkspace);
  registry.setWorkspace(OpKind::Conv2D, conv2dWorkspace);
}

} // namespace cpc::kernels
