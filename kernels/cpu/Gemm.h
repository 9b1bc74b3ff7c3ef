//===- Gemm.h - the CPU kernels' one GEMM entry: OpenBLAS on the rank's pool -===//
//
// A rank has one thread pool (OpenMP's), shared by every CPU kernel. OpenBLAS runs single
// threaded inside it: its own pthread pool never gets work, so the two pools cannot spin against
// each other on the same cores (issue 15: a second thread made a step 1.5-2.5x slower). A GEMM
// big enough to pay for threads is cut into row or column blocks, each an independent
// single-threaded OpenBLAS call on one pool thread; a batch of small GEMMs is spread over the
// pool whole. The cuts fall where the running OpenBLAS computes every element of C as the uncut
// call does (GemmCuts.h), so a result never depends on the thread count.
//
#ifndef CPC_KERNELS_CPU_GEMM_H
#define CPC_KERNELS_CPU_GEMM_H

#include <cstdint>
#include <vector>

#include "kernels/cpu/GemmCuts.h"

namespace cpc::kernels {

/// Row-major C[M,N] = op(A)[M,K] op(B)[K,N] + beta C; op(A) reads A stored [K,M] when tA.
template <typename T> struct Gemm {
  bool tA = false, tB = false;
  int64_t M = 0, N = 0, K = 0;
  const T *A = nullptr;
  int64_t lda = 0;
  const T *B = nullptr;
  int64_t ldb = 0;
  T beta = 0;
  T *C = nullptr;
  int64_t ldc = 0;
};

/// Multiply-adds that pay for another thread when whole GEMMs (or attention slices) are spread
/// over the pool; cutting one GEMM needs kGemmMinBlockWork per block.
constexpr int64_t kGemmMinWorkPerThread = int64_t(1) << 19;

/// Runs one GEMM on up to `threads` pool threads (serially when called inside a parallel region):
/// as calls of at most kGemmRowChunk rows, each cut by gemmSplit.
void gemm(const Gemm<float> &g, int threads);
void gemm(const Gemm<double> &g, int threads);

/// Runs independent GEMMs (disjoint results): many small ones spread whole over the pool, a few
/// large ones one after another, each split.
void gemmBatch(const std::vector<Gemm<float>> &gemms, int threads);
void gemmBatch(const std::vector<Gemm<double>> &gemms, int threads);

} // namespace cpc::kernels

#endif
