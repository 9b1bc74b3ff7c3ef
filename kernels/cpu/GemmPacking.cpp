//===- GemmPacking.cpp - what OpenBLAS's packing buffer keeps after a GEMM ---===//
#include "kernels/cpu/GemmPacking.h"
#include "kernels/cpu/GemmCuts.h"

#include <algorithm>

namespace cpc::kernels {
namespace {

struct Blocking {
  int64_t p, q, unrollM, unrollN, elementBytes;
};
constexpr Blocking kHaswellSingle{320, 320, 8, 4, 4};
constexpr Blocking kHaswellDouble{512, 256, 4, 8, 8};

/// `extent` halved and rounded up to `unroll` (the driver's split of a block under two whole ones).
int64_t half(int64_t extent, int64_t unroll) { return (extent / 2 + unroll - 1) / unroll * unroll; }

} // namespace

KernelWorkspace gemmPacking(int64_t M, int64_t N, int64_t K, bool isDouble) {
  KernelWorkspace w;
  if (M <= 0 || N <= 0 || K <= 0)
    return w;
  const Blocking &b = isDouble ? kHaswellDouble : kHaswellSingle;
  int64_t columns = N, rows = std::min(M, kGemmRowChunk); // the column-major view's M' and N'
  int64_t kBlock = K >= 2 * b.q ? b.q : K > b.q ? half(K, b.unrollM) : K;
  int64_t aBlock = columns >= 2 * b.p ? b.p : columns > b.p ? half(columns, b.unrollM) : columns;
  w.packedA = aBlock * kBlock * b.elementBytes;
  w.packedB = (columns > b.p ? rows : 3 * b.unrollN) * kBlock * b.elementBytes;
  return w;
}

} // namespace cpc::kernels
