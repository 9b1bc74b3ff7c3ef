//===- GemmCuts.cpp - the cut rule of the running OpenBLAS, and the cut ------===//
#include "kernels/cpu/GemmCuts.h"

#include <cblas.h>

#include <algorithm>
#include <array>
#include <utility>

namespace cpc::kernels {
namespace {

/// The x86-64 cores of OpenBLAS 0.3.21's DYNAMIC_ARCH build (openblas_get_corename() spelling).
constexpr std::array<std::string_view, 20> kKnownCores = {
    "Prescott", "Core2",      "Penryn",    "Dunnington", "Nehalem",     "Atom",      "Nano",
    "Opteron",  "Opteron_SSE3", "Barcelona", "Bobcat",   "Sandybridge", "Bulldozer", "Piledriver",
    "Steamroller", "Excavator", "Haswell", "Zen",        "SkylakeX",    "Cooperlake"};
constexpr std::string_view kKnownVersion = "OpenBLAS 0.3.21 ";
constexpr std::string_view kKnownBuild = " DYNAMIC_ARCH ";

/// Cut points near i * extent / parts (i = 1 .. parts-1) on multiples of `align` in [lo, hi].
std::vector<int64_t> evenBounds(int64_t extent, int parts, int64_t align, int64_t lo, int64_t hi) {
  std::vector<int64_t> bounds = {0};
  for (int i = 1; i < parts; ++i) {
    int64_t want = (int64_t)((double)extent * i / parts);
    int64_t cut = std::clamp((want + align / 2) / align * align, lo, hi);
    if (cut > bounds.back() && cut < extent)
      bounds.push_back(cut);
  }
  bounds.push_back(extent);
  return bounds;
}

/// The shortest and the longest block of `bounds`.
std::pair<int64_t, int64_t> blockExtents(const std::vector<int64_t> &bounds) {
  std::pair<int64_t, int64_t> extents = {bounds.back(), 0};
  for (size_t i = 1; i < bounds.size(); ++i) {
    extents.first = std::min(extents.first, bounds[i] - bounds[i - 1]);
    extents.second = std::max(extents.second, bounds[i] - bounds[i - 1]);
  }
  return extents;
}

/// The cut of `extent` rows or columns (`otherTimesK`: a row's or column's multiply-adds) into at
/// most `parts` blocks of kGemmMinBlockWork or more, on multiples of `align` and leaving at least
/// `lastAtLeast` after the last cut; one block where there is none.
std::vector<int64_t> cutSide(int64_t extent, int64_t otherTimesK, int parts, int64_t align, int64_t lastAtLeast) {
  int64_t lastCut = (extent - lastAtLeast) / align * align;
  for (; parts > 1 && lastCut >= align; --parts) {
    std::vector<int64_t> bounds = evenBounds(extent, parts, align, align, lastCut);
    if (bounds.size() > 2 && blockExtents(bounds).first * otherTimesK >= kGemmMinBlockWork)
      return bounds;
  }
  return {0, extent};
}

} // namespace

GemmCutRule gemmCutRuleFor(std::string_view config, std::string_view core, bool isDouble) {
  GemmCutRule rule;
  if (config.substr(0, kKnownVersion.size()) != kKnownVersion || config.find(kKnownBuild) == config.npos ||
      std::find(kKnownCores.begin(), kKnownCores.end(), core) == kKnownCores.end())
    return rule;
  rule.known = true;
  bool haswellKernels = core == "Haswell" || core == "Zen", skylakeKernels = core == "SkylakeX" || core == "Cooperlake";
  if (!isDouble && haswellKernels) { // sgemm_kernel_8x4_haswell_2.c
    rule.colAlign = rule.colLastAtLeast = 320; // SGEMM_DEFAULT_P: whole panels
    rule.colTileRows = 12;                     // 3 x SGEMM_DEFAULT_UNROLL_N
    rule.colTailRows = 4;                      // SGEMM_DEFAULT_UNROLL_N
  }
  if (isDouble && skylakeKernels) { // dgemm_kernel_16x2_skylakex.c
    rule.colTailUnroll = 8;         // its m = 4 and m = 2 tiles
    rule.colPanel = 192;            // DGEMM_DEFAULT_P
  }
  return rule;
}

std::string openBlasDescription() {
  std::string config = openblas_get_config();
  while (!config.empty() && config.back() == ' ')
    config.pop_back();
  return config + " (core " + openblas_get_corename() + ")";
}

const GemmCutRule &gemmCutRule(bool isDouble) {
  static const GemmCutRule single = gemmCutRuleFor(openblas_get_config(), openblas_get_corename(), false);
  static const GemmCutRule forDouble = gemmCutRuleFor(openblas_get_config(), openblas_get_corename(), true);
  return isDouble ? forDouble : single;
}

GemmSplit gemmSplit(int64_t M, int64_t N, int64_t K, int threads, const GemmCutRule &rule) {
  GemmSplit split;
  split.rows = M >= N;
  split.bounds = {0, split.rows ? M : N};
  int64_t k = std::max<int64_t>(K, 1);
  int parts = (int)std::min<int64_t>(threads, M * N * k / kGemmMinBlockWork);
  if (!rule.known || parts <= 1 || M <= 0 || N <= 0)
    return split;
  std::vector<int64_t> rows = cutSide(M, N * k, parts, kGemmRowAlign, 1);
  std::vector<int64_t> cols = {0, N};
  int64_t colsAfterLast = rule.colLastAtLeast;
  if (rule.colTailUnroll && N % rule.colTailUnroll && N > rule.colPanel)
    colsAfterLast = std::max(colsAfterLast, rule.colPanel + 1);
  if (!rule.colTileRows || M % rule.colTileRows <= rule.colTailRows)
    cols = cutSide(N, M * k, parts, rule.colAlign, colsAfterLast);
  // The longer side is cut, so that the operand every block packs again (B when cutting rows, A
  // when cutting columns) is the smaller; measured faster even against evener column blocks. The
  // other side only where the longer cannot be cut or would leave a block a twentieth larger.
  bool rowsLonger = M >= N;
  const std::vector<int64_t> &longer = rowsLonger ? rows : cols, &shorter = rowsLonger ? cols : rows;
  int64_t longerSpan = blockExtents(longer).second * (rowsLonger ? N : M);
  int64_t shorterSpan = blockExtents(shorter).second * (rowsLonger ? M : N);
  bool useShorter = shorter.size() > 2 && (longer.size() == 2 || 20 * longerSpan > 21 * shorterSpan);
  split.rows = rowsLonger != useShorter;
  split.bounds = useShorter ? shorter : longer;
  return split;
}

std::vector<int64_t> gemmRowPanels(int64_t M, int64_t N, int64_t K, int64_t rows) {
  int64_t perRow = std::max<int64_t>(N, 1) * std::max<int64_t>(K, 1);
  int64_t panel = std::max(rows, (kGemmMinBlockWork + perRow - 1) / perRow);
  panel = std::min(kGemmRowChunk, (panel + kGemmRowAlign - 1) / kGemmRowAlign * kGemmRowAlign);
  std::vector<int64_t> bounds = {0};
  for (int64_t c0 = 0; c0 < M; c0 += kGemmRowChunk) {
    int64_t c1 = std::min(M, c0 + kGemmRowChunk);
    for (int64_t cut = c0 + panel; c1 - cut >= panel; cut += panel)
      bounds.push_back(cut);
    bounds.push_back(c1);
  }
  return bounds;
}

} // namespace cpc::kernels
