//===- Gemm.cpp - OpenBLAS GEMMs split over the rank's OpenMP pool ----------===//
#include "kernels/cpu/Gemm.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <type_traits>

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

/// Rows [begin, end) of `g`'s C, or its columns when `!rows`: a GEMM of its own.
template <typename T> Gemm<T> block(const Gemm<T> &g, bool rows, int64_t begin, int64_t end) {
  Gemm<T> b = g;
  if (rows) {
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

/// One call of at most kGemmRowChunk rows, cut over up to `threads` threads.
template <typename T> void chunkOn(const Gemm<T> &g, int threads) {
  GemmSplit split = gemmSplit(g.M, g.N, g.K, threads, gemmCutRule(std::is_same_v<T, double>));
  if (split.parts() == 1)
    return blas(g);
#pragma omp parallel for num_threads(split.parts()) schedule(static, 1)
  for (int part = 0; part < split.parts(); ++part)
    blas(block(g, split.rows, split.bounds[part], split.bounds[part + 1]));
}

/// The GEMM as calls of at most kGemmRowChunk rows, at every thread count (GemmCuts.h).
template <typename T> void gemmOn(const Gemm<T> &g, int threads) {
  if (g.M <= 0 || g.N <= 0)
    return;
  keepBlasSingleThreaded();
  threads = omp_in_parallel() ? 1 : threads;
  for (int64_t r0 = 0; r0 < g.M; r0 += kGemmRowChunk)
    chunkOn(block(g, true, r0, std::min(g.M, r0 + kGemmRowChunk)), threads);
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
    gemmOn(gemms[i], 1);
}

} // namespace

void gemm(const Gemm<float> &g, int threads) { gemmOn(g, threads); }
void gemm(const Gemm<double> &g, int threads) { gemmOn(g, threads); }
void gemmBatch(const std::vector<Gemm<float>> &gemms, int threads) { gemmBatchOn(gemms, threads); }
void gemmBatch(const std::vector<Gemm<double>> &gemms, int threads) { gemmBatchOn(gemms, threads); }

} // namespace cpc::kernels
