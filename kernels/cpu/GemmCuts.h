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
// - The kernels of every core but one compute an element of a tile the same way wherever the tile
//   lies. Haswell's and Zen's SGEMM kernel (sgemm_kernel_8x4_haswell_2.c) does not: its n = 4
//   tiles (COMPUTE_m8n4) and the first and last 8 rows of a panel in its n = 12 tiles
//   (COMPUTE_H_m8n6, COMPUTE_T_m8n6) sum even and odd k in two registers, added at the end, while
//   its other tiles sum in one; and the first panel's kernel calls (12, 12, ..., then 4s) cut a
//   remainder of rows differently from the later panels' (12, ..., then 8, 4, 2, 1). So there
//   rows are cut at multiples of 12 (24 serves), and columns only at multiples of GEMM_P = 320
//   (whole panels), with at least one panel after the last cut, and only when the rows left
//   after the last 12-row tile are at most 4 (one kernel call of the same width either way).
// - SkylakeX-class cores have small-matrix kernels for calls of M N K <= 10^6: no block is ever
//   that small (kGemmMinBlockWork), and no call is cut that small.
// - GEMM_R is at least 8640 rows on every x86-64 core (SkylakeX's DGEMM_R), but not a multiple
//   of 24 everywhere (Haswell's SGEMM: 104512): a GEMM of more rows is always issued as calls of
//   kGemmRowChunk rows, at any thread count, so the driver never starts a second chunk.
//
// Another OpenBLAS version or an unknown core: nothing is cut (each GEMM on one thread; the
// results stay thread-independent) and cpc-run says so once.
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
  bool known = false;     // a version and core whose kernels are read (else nothing is cut)
  int64_t colPanel = 0;   // > 0: columns only at multiples of this, with a whole panel after the last
  int64_t colTileRows = 0; // with colPanel: M % colTileRows must be <= colTailRows
  int64_t colTailRows = 0;
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
