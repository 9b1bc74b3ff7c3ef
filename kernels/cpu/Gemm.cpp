//===- Gemm.cpp - OpenBLAS GEMMs split over the rank's OpenMP pool ----------===//
#include "kernels/cpu/Gemm.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>

namespace cpc::kernels {
namespace {

/// OpenBLAS computes on the calling thread only. Set once per process before the first GEMM;
/// the threads OpenBLAS may have started at load stay parked.
void keepBlasSingleThreaded() {
  static const bool once = [] {
    openblas_set_num_threads(1);
    return true;
  }();
  (void)once;
}

void blas(const Gemm<float> &g) {
  cblas_sgemm(CblasRowMajor, g.tA ? CblasTrans : CblasNoTrans, g.tB ? CblasTrans : CblasNoTrans, (int)g.M, (int)g.N,
              (int)g.K, 1.0f, g.A, (int)g.lda, g.B, (int)g.ldb, g.beta, g.C, (int)g.ldc);
}
void blas(const Gemm<double> &g) {
  cblas_dgemm(CblasRowMajor, g.tA ? CblasTrans : CblasNoTrans, g.tB ? CblasTrans : CblasNoTrans, (int)g.M, (int)g.N,
              (int)g.K, 1.0, g.A, (int)g.lda, g.B, (int)g.ldb, g.beta, g.C, (int)g.ldc);
}

/// Block `part` of `g` under `split`: a sub-GEMM over rows [r0, r1) or columns [c0, c1) of C.
template <typename T> Gemm<T> block(const Gemm<T> &g, const GemmSplit &split, int part) {
  Gemm<T> b = g;
  int64_t extent = split.rows ? g.M : g.N;
  int64_t begin = std::min(extent, part * split.block), end = std::min(extent, begin + split.block);
  if (split.rows) {
    b.M = end - begin;
    b.A = g.tA ? g.A + begin : g.A + begin * g.lda;
    b.C = g.C + begin * g.ldc;
  } else {
    b.N = end - begin;
    b.B = g.tB ? g.B + begin * g.ldb : g.B + begin;
    b.C = g.C + begin;
  }
  return b;
}

template <typename T> void gemmOn(const Gemm<T> &g, int threads) {
  if (g.M <= 0 || g.N <= 0)
    return;
  keepBlasSingleThreaded();
  GemmSplit split = gemmSplit(g.M, g.N, g.K, omp_in_parallel() ? 1 : threads);
  if (split.parts == 1)
    return blas(g);
#pragma omp parallel for num_threads(split.parts) schedule(static, 1)
  for (int part = 0; part < split.parts; ++part) {
    Gemm<T> b = block(g, split, part);
    if (b.M > 0 && b.N > 0)
      blas(b);
  }
}

template <typename T> void gemmBatchOn(const std::vector<Gemm<T>> &gemms, int threads) {
  if (gemms.empty())
    return;
  keepBlasSingleThreaded();
  int64_t work = 0;
  for (const Gemm<T> &g : gemms)
    work += g.M * g.N * std::max<int64_t>(g.K, 1);
  int useful = (int)std::clamp<int64_t>(work / kGemmMinWorkPerThread, 1, std::max(threads, 1));
  // Whole GEMMs per thread when there are enough to keep every thread busy; else split each.
  if (omp_in_parallel() || useful == 1 || (int64_t)gemms.size() < 2 * useful) {
    for (const Gemm<T> &g : gemms)
      gemmOn(g, threads);
    return;
  }
#pragma omp parallel for num_threads(useful) schedule(static)
  for (size_t i = 0; i < gemms.size(); ++i)
    if (gemms[i].M > 0 && gemms[i].N > 0)
      blas(gemms[i]);
}

} // namespace

GemmSplit gemmSplit(int64_t M, int64_t N, int64_t K, int threads) {
  GemmSplit split;
  split.rows = M >= N;
  int64_t extent = split.rows ? M : N;
  split.block = extent;
  int64_t byWork = M * N * std::max<int64_t>(K, 1) / kGemmMinWorkPerThread;
  int64_t byExtent = extent / kGemmBlockAlign;
  int64_t parts = std::min<int64_t>({threads, byWork, byExtent});
  if (parts <= 1)
    return split;
  int64_t per = (extent + parts - 1) / parts;
  split.block = (per + kGemmBlockAlign - 1) / kGemmBlockAlign * kGemmBlockAlign;
  split.parts = (int)((extent + split.block - 1) / split.block);
  return split;
}

void gemm(const Gemm<float> &g, int threads) { gemmOn(g, threads); }
void gemm(const Gemm<double> &g, int threads) { gemmOn(g, threads); }
void gemmBatch(const std::vector<Gemm<float>> &gemms, int threads) { gemmBatchOn(gemms, threads); }
void gemmBatch(const std::vector<Gemm<double>> &gemms, int threads) { gemmBatchOn(gemms, threads); }

} // namespace cpc::kernels
