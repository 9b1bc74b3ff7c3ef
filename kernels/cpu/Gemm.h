//===- Gemm.h - the CPU kernels' one GEMM entry: OpenBLAS on the rank's pool -===//
//
// A rank has one thread pool (OpenMP's), shared by every CPU kernel. OpenBLAS runs single
// threaded inside it: its own pthread pool never gets work, so the two pools cannot spin against
// each other on the same cores (issue 15: a second thread made a step 1.5-2.5x slower). A GEMM
// big enough to pay for threads is cut into row or column blocks, each an independent
// single-threaded OpenBLAS call on one pool thread; a batch of small GEMMs is spread over the
// pool whole. The cut falls on multiples of kGemmBlockAlign rows/columns, so every element of C
// is computed by the same micro-kernel order whatever the thread count.
//
#ifndef CPC_KERNELS_CPU_GEMM_H
#define CPC_KERNELS_CPU_GEMM_H

#include <cstdint>
#include <vector>

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

/// How a GEMM is cut over the pool: `parts` blocks of `block` rows (or columns) of C.
struct GemmSplit {
  int parts = 1;
  bool rows = true; // blocks of rows of C (else of columns)
  int64_t block = 0;
};

constexpr int64_t kGemmBlockAlign = 16;
/// Multiply-adds a thread must get before a GEMM is split (below, starting threads costs more).
constexpr int64_t kGemmMinWorkPerThread = int64_t(1) << 19;

/// The split of an M x N x K GEMM on `threads` threads: the longer of M and N is cut, so the
/// operand every block packs again (B when cutting rows, A when cutting columns) is the smaller.
GemmSplit gemmSplit(int64_t M, int64_t N, int64_t K, int threads);

/// Runs one GEMM on up to `threads` pool threads (serially when called inside a parallel region).
void gemm(const Gemm<float> &g, int threads);
void gemm(const Gemm<double> &g, int threads);

/// Runs independent GEMMs (disjoint results): many small ones spread whole over the pool, a few
/// large ones one after another, each split.
void gemmBatch(const std::vector<Gemm<float>> &gemms, int threads);
void gemmBatch(const std::vector<Gemm<double>> &gemms, int threads);

} // namespace cpc::kernels

#endif
