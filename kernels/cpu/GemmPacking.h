//===- GemmPacking.h - what OpenBLAS's packing buffer keeps after a GEMM -----===//
//
// OpenBLAS packs a GEMM's operands into a buffer of its own per calling thread (a 128 MiB
// mapping; only the pages written are resident, and they stay so for the process): A's block
// at its start (sa), B's panel after room for a whole GEMM_P x GEMM_Q block (sb). Its level-3
// driver (0.3.21, driver/level3/level3.c) works on the column-major view of our row-major
// C = A B, whose M is our N and whose N is our M:
//   the K block  min_l = K >= 2Q ? Q : K > Q ? K/2 rounded up to UNROLL_M : K
//   the A block  min_i = M' >= 2P ? P : M' > P ? M'/2 rounded up to UNROLL_M : M'
//   the B panel  min_l x N' (our rows, at most kGemmRowChunk) when M' > P; else the driver
//                packs 3 x UNROLL_N columns at a time into the same place.
// The blockings are those of Haswell's and Zen's kernels (SGEMM P = Q = 320, 8 x 4; DGEMM P =
// 512, Q = 256, 4 x 8), measured here against the resident growth of single calls to within
// two pages; other cores are priced with them too, an estimate.
//
#ifndef CPC_KERNELS_CPU_GEMMPACKING_H
#define CPC_KERNELS_CPU_GEMMPACKING_H

#include "kernels/Kernel.h"

#include <cstdint>

namespace cpc::kernels {

/// The packing bytes one single-threaded OpenBLAS call of a row-major M x N x K GEMM writes
/// (M larger than kGemmRowChunk: as the calls of that many rows it is issued as).
KernelWorkspace gemmPacking(int64_t M, int64_t N, int64_t K, bool isDouble);

} // namespace cpc::kernels

#endif
