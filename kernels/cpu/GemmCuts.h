//===- GemmCuts.h - where a GEMM may be cut without changing a bit -----------===//
//
// A GEMM run on several threads is cut into blocks of rows or columns of C, each one
// single-threaded OpenBLAS call. A block gives the bits of the uncut call only where OpenBLAS
// computes each element the same way in both; where it does depends on its level-3 driver and on
// the selected core's kernels (OpenBLAS 0.3.21, Debian 12's; read from its source):
//
// - driver/level3/level3.c cuts C's columns in the column-major view (our rows) into chunks of
//   GEMM_R, and inside each, for the first panel, into kernel calls of 3 x UNROLL_N; later panels
//   pass the whole chunk to the kernel. It cuts the column-major rows (our columns) into panels of
//   GEMM_P (the rest halved, rounded to UNROLL_M). Every x86-64 core has UNROLL_N in {2, 4, 8}
//   and UNROLL_M <= 16, so row cuts at multiples of 24 and column cuts at multiples of 16 fall
//   on every kernel call's and tile's boundary, relative to where the call starts.
// - Most kernels compute an element of a tile the same way wherever the tile lies, or differ
//   only in a call's last rows and columns, which these cuts keep in place. Two do not:
//   * Haswell's and Zen's SGEMM (sgemm_kernel_8x4_haswell_2.c): its n = 4 tiles (COMPUTE_m8n4)
//     and the first and last 8 rows of a panel in its n = 12 tiles (COMPUTE_H_m8n6,
//     COMPUTE_T_m8n6) sum even and odd k in two registers, added at the end, while its other
//     tiles sum in one; and the first panel's kernel calls (12, 12, ..., then 4s) cut a
//     remainder of rows differently from the later panels' (12, ..., then 8, 4, 2, 1). There
//     rows are cut at multiples of 12 (24 serves), and columns only at multiples of GEMM_P = 320
//     (whole panels), with at least one panel after the last cut, and only when the rows left
//     after the last 12-row tile are at most 4 (one kernel call of the same width either way).
//   * SkylakeX's and Cooperlake's DGEMM (dgemm_kernel_16x2_skylakex.c): its m = 4 and m = 2
//     tiles of 12 columns (KERNEL_k1m4n12, KERNEL_k1m2n12) sum even and odd k in the two halves
//     of a register, and 12-wide calls happen only after a call's first panel (the first gets
//     3 x UNROLL_N = 6): the last N % 8 columns round one way in the first panel and another in
//     later ones. Where N % 8 != 0 and N > GEMM_P = 192, more than one panel follows the last
//     column cut, so that they lie in a later panel in both.
// - SkylakeX-class cores have small-matrix kernels for calls of M N K <= 10^6: no block is ever
//   that small (kGemmMinBlockWork), and no call is cut that small.
// - DYNAMIC_ARCH computes GEMM_R at start-up from its 128 MiB buffer: over 40000 rows on every
//   x86-64 core (43472 in SkylakeX's DGEMM), but not a multiple of 24 everywhere (104512 in
//   Haswell's SGEMM): a GEMM of more than kGemmRowChunk rows is always issued as calls of that
//   many rows, at any thread count, so the driver never starts a second chunk.
// - The rules hold for the DYNAMIC_ARCH build Debian ships: its interface and driver are built
//   for no core in particular, so they never take the AVX-512 "direct" SGEMM path or the
//   SkylakeX driver's 6 x UNROLL_N calls.
//
// Another OpenBLAS version or build, or an unknown core: nothing is cut (each GEMM on one
// thread; the results stay thread-independent) and cpc-run says so once.
//
#ifndef CPC_KERNELS_CPU_GEMMCUTS_H
#define CPC_KERNELS_CPU_GEMMCUTS_H

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace cpc::kernels {

constexpr int64_t kGemmRowAlign = 24;
constexpr int64_t kGemmColAlign = 16;
constexpr int64_t kGemmRowChunk = 8064; // 336 x 24, below every core's GEMM_R
/// Multiply-adds a block needs: above the small-matrix kernels' 10^6, and enough to pay a thread.
constexpr int64_t kGemmMinBlockWork = int64_t(1) << 20;

/// What the running OpenBLAS allows for one element type.
struct GemmCutRule {
  bool known = false;                // a version, build and core whose kernels are read
  int64_t colAlign = kGemmColAlign;  // column cuts on multiples of this
  int64_t colLastAtLeast = 1;        // columns after the last cut
  int64_t colTileRows = 0;           // > 0: column cuts only when M % colTileRows <= colTailRows
  int64_t colTailRows = 0;
  int64_t colTailUnroll = 0;         // > 0: when N % colTailUnroll != 0 and N > colPanel, more
  int64_t colPanel = 0;              // than colPanel columns after the last cut
};

/// The rule for OpenBLAS's `openblas_get_config()` text and `openblas_get_corename()`.
GemmCutRule gemmCutRuleFor(std::string_view config, std::string_view core, bool isDouble);
/// The rule of the OpenBLAS this process runs (read once).
const GemmCutRule &gemmCutRule(bool isDouble);
/// "OpenBLAS 0.3.21 ... (core Haswell)": for messages.
std::string openBlasDescription();

/// How one GEMM of at most kGemmRowChunk rows is cut: block i covers [bounds[i], bounds[i+1]) of
/// C's rows (or columns). One block: not cut.
struct GemmSplit {
  bool rows = true;
  std::vector<int64_t> bounds;
  int parts() const { return (int)bounds.size() - 1; }
};

/// The cut of an M x N x K GEMM (M <= kGemmRowChunk) for `threads` threads under `rule`: up to
/// `threads` blocks of kGemmMinBlockWork or more, along the longer side where it can be cut.
GemmSplit gemmSplit(int64_t M, int64_t N, int64_t K, int threads, const GemmCutRule &rule);

/// Row blocks [bounds[i], bounds[i+1]) whose separate calls give the bits of one call, for kernels
/// that stage operands a panel at a time: about `rows` rows each (multiples of kGemmRowAlign),
/// never across a kGemmRowChunk boundary, and of kGemmMinBlockWork or more unless one block is a
/// whole chunk (a short last block joins the one before).
std::vector<int64_t> gemmRowPanels(int64_t M, int64_t N, int64_t K, int64_t rows);

} // namespace cpc::kernels

#endif
