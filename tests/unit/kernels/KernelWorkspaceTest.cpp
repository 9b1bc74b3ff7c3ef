//===- KernelWorkspaceTest.cpp - what kernels keep beyond their operands -----===//
#include "kernels/cpu/GemmCuts.h"
#include "kernels/cpu/GemmPacking.h"
#include "kernels/cpu/GrowingScratch.h"
#include "tests/unit/kernels/KernelTestUtil.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

using namespace cpc;
using namespace cpc::kernels;

namespace {

/// What the registry says `op`'s kernel keeps on these operands (shapes and types only).
KernelWorkspace workspaceOf(OpKind op, std::vector<TensorRef> ins, std::vector<TensorRef> outs,
                            const nlohmann::json &attrs = nlohmann::json::object()) {
  KernelContext ctx;
  ctx.op = op;
  ctx.inputs = std::move(ins);
  ctx.outputs = std::move(outs);
  ctx.setAttrs(attrs);
  return KernelRegistry::cpu().workspace(op, ctx);
}

TensorRef shaped(std::vector<int64_t> shape, DType t = DType::F32) { return TensorRef{nullptr, t, std::move(shape)}; }

} // namespace

// The driver's blocking (Haswell's and Zen's kernels), in our row-major view: the column-major M
// is our N. Each figure was measured as the resident growth of one cblas call on this machine.
TEST(GemmPacking, FollowsTheLevel3DriversBlocks) {
  // N >= 2P: A's block is P x Q, B's panel every row x Q.
  KernelWorkspace big = gemmPacking(1024, 1024, 1024, false);
  EXPECT_EQ(big.packedA, 320 * 320 * 4);
  EXPECT_EQ(big.packedB, 1024 * 320 * 4);
  // P < N < 2P: half of N (rounded up to UNROLL_M 8); K < 2Q is halved alike.
  KernelWorkspace middle = gemmPacking(2048, 512, 512, false);
  EXPECT_EQ(middle.packedA, 256 * 256 * 4);
  EXPECT_EQ(middle.packedB, 2048 * 256 * 4);
  // N <= P: one block of A; B is packed 3 x UNROLL_N columns at a time into one place.
  KernelWorkspace narrow = gemmPacking(8000, 64, 512, false);
  EXPECT_EQ(narrow.packedA, 64 * 256 * 4);
  EXPECT_EQ(narrow.packedB, 3 * 4 * 256 * 4);
  // Doubles: P 512, Q 256, UNROLL 4 x 8.
  KernelWorkspace wide = gemmPacking(2000, 600, 300, true);
  EXPECT_EQ(wide.packedA, 300 * 152 * 8);
  EXPECT_EQ(wide.packedB, 2000 * 152 * 8);
  // More rows than a call takes: calls of kGemmRowChunk rows.
  EXPECT_EQ(gemmPacking(3 * kGemmRowChunk, 1024, 64, false).packedB, kGemmRowChunk * 64 * 4);
  KernelWorkspace none = gemmPacking(0, 16, 16, false);
  EXPECT_EQ(none.packedA + none.packedB + none.heapBytes, 0);
}

TEST(KernelWorkspace, MatmulPacksItsGemmAndMatmulBiasItsMatmul) {
  KernelWorkspace w = workspaceOf(OpKind::MatMul, {shaped({4, 256, 768}), shaped({768, 3072})}, {shaped({4, 256, 3072})});
  KernelWorkspace want = gemmPacking(4 * 256, 3072, 768, false);
  EXPECT_EQ(w.packedA, want.packedA);
  EXPECT_EQ(w.packedB, want.packedB);
  KernelWorkspace fused = workspaceOf(OpKind::MatMulBias, {shaped({4, 256, 768}), shaped({768, 3072}), shaped({3072})},
                                      {shaped({4, 256, 3072})});
  EXPECT_EQ(fused.packedB, want.packedB);
  // 16-bit operands go through f32 a panel of rows at a time: B's panel is a panel's rows.
  KernelWorkspace half = workspaceOf(OpKind::MatMul, {shaped({4096, 768}, DType::BF16), shaped({768, 768}, DType::BF16)},
                                     {shaped({4096, 768}, DType::BF16)});
  EXPECT_LT(half.packedB, gemmPacking(4096, 768, 768, false).packedB);
  EXPECT_GT(half.packedB, 0);
}

TEST(KernelWorkspace, ConvolutionsKeepTheirColumnMatrix) {
  nlohmann::json attrs = {{"strides", {16, 16}}, {"padding", {0, 0, 0, 0}}, {"dilations", {1, 1}}, {"groups", 1}};
  KernelWorkspace patches = workspaceOf(OpKind::Conv2D, {shaped({8, 3, 224, 224}), shaped({768, 3, 16, 16})},
                                        {shaped({8, 768, 14, 14})}, attrs);
  EXPECT_EQ(patches.heapBytes, 3 * 16 * 16 * 14 * 14 * 4); // one image's columns: Kc x P
  EXPECT_EQ(patches.packedA, gemmPacking(768, 196, 768, false).packedA);
  nlohmann::json pointwise = {{"strides", {1, 1}}, {"padding", {0, 0, 0, 0}}, {"dilations", {1, 1}}, {"groups", 1}};
  EXPECT_EQ(workspaceOf(OpKind::Conv2D, {shaped({2, 64, 8, 8}), shaped({32, 64, 1, 1})}, {shaped({2, 32, 8, 8})}, pointwise)
                .heapBytes,
            0); // the image is its own column matrix
  KernelWorkspace weight = workspaceOf(OpKind::Conv2DGradWeight, {shaped({8, 3, 224, 224}), shaped({8, 768, 14, 14})},
                                       {shaped({768, 3, 16, 16})}, attrs);
  EXPECT_EQ(weight.heapBytes, patches.heapBytes);
}

TEST(KernelWorkspace, LayerNormGradKeepsItsBlocksPartialSums) {
  nlohmann::json attrs = {{"axis", 1}, {"epsilon", 1e-5}};
  KernelWorkspace w = workspaceOf(OpKind::LayerNormGrad, {shaped({4096, 768}), shaped({768}), shaped({4096, 768})},
                                  {shaped({4096, 768}), shaped({768}), shaped({768})}, attrs);
  EXPECT_EQ(w.heapBytes, 2 * (4096 / 16) * 768 * 8); // blocks of 16 rows (4096 / 256), dscale and dbias
  EXPECT_EQ(workspaceOf(OpKind::Add, {shaped({4}), shaped({4})}, {shaped({4})}).heapBytes, 0);
}

TEST(KernelWorkspace, CoverTakesEachPartsLargest) {
  KernelWorkspace a{100, 5, 70}, b{10, 50, 7};
  a.cover(b);
  EXPECT_EQ(a.heapBytes, 100);
  EXPECT_EQ(a.packedA, 50);
  EXPECT_EQ(a.packedB, 70);
}

TEST(GrowingScratch, KeepsItsBufferUntilItMustGrowThenStartsZeroed) {
  GrowingScratch scratch;
  auto *first = static_cast<unsigned char *>(scratch.reserve(100));
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(first) % 4096, 0u); // a mapping of its own
  std::memset(first, 7, 100);
  EXPECT_EQ(scratch.reserve(4096), first); // one page was mapped: no new buffer
  auto *grown = static_cast<unsigned char *>(scratch.reserve(3 * 4096 + 1));
  std::vector<unsigned char> zeros(3 * 4096 + 1, 0);
  EXPECT_EQ(std::memcmp(grown, zeros.data(), zeros.size()), 0);
  EXPECT_NE(scratch.reserve(0), nullptr);
}
