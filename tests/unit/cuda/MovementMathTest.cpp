//===- MovementMathTest.cpp - the CUDA movement kernels' index maps on the host ===//
//
// Applies the plans the CUDA transpose, slice, broadcast, concat and pad build (merged dims,
// widened words, 32x32 transpose tiles, pad's source map and value bytes) to whole tensors, as
// the kernels' threads would, and compares the bytes with the CPU kernels' results.
//
#include "kernels/Checks.h"
#include "kernels/cuda/MovementMath.h"
#include "tests/unit/cuda/CudaTestUtil.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

using namespace cpc;
using namespace cpc::kernels;
using namespace cpc::kernels::cuda;
using namespace cpc::cudatest;

namespace {

HostTensor randomBytes(DType t, std::vector<int64_t> shape, uint64_t seed) {
  HostTensor b(t, std::move(shape));
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 99;
  for (size_t i = 0; i < b.size(); ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    b.data()[i] = uint8_t(x >> 24);
  }
  if (t == DType::I1)
    for (size_t i = 0; i < b.size(); ++i)
      b.data()[i] &= 1;
  return b;
}

/// What the strided copy kernels do with `plan` (the tile kernel's loops, or the grid-stride
/// loop over widened words).
void emulateStridedCopy(StridedCopy plan, uint8_t *dst, const uint8_t *src) {
  TileTranspose t;
  if (planTileTranspose(plan, t)) {
    int w = plan.wordBytes;
    std::vector<uint8_t> tile(kTile * (kTile + 1) * w);
    for (int64_t k = 0; k < t.tiles; ++k) {
      TileOrigin at = tileOrigin(t, k);
      const uint8_t *s = src + (t.outer.base + sourceOffset(t.outer, (uint64_t)at.slab)) * w;
      uint8_t *d = dst + at.slab * t.rows * t.cols * w;
      for (int ty = 0; ty < kTileRowsPerStep; ++ty)
        for (int tx = 0; tx < kTile; ++tx)
          for (int step = 0; step < kTile; step += kTileRowsPerStep) {
            int64_t i = at.row0 + tx, j = at.col0 + ty + step;
            if (i < t.rows && j < t.cols)
              std::memcpy(&tile[((ty + step) * (kTile + 1) + tx) * w], s + (i + j * t.colStride) * w, w);
          }
      for (int ty = 0; ty < kTileRowsPerStep; ++ty)
        for (int tx = 0; tx < kTile; ++tx)
          for (int step = 0; step < kTile; step += kTileRowsPerStep) {
            int64_t i = at.row0 + ty + step, j = at.col0 + tx;
            if (i < t.rows && j < t.cols)
              std::memcpy(d + (i * t.cols + j) * w, &tile[(tx * (kTile + 1) + ty + step) * w], w);
          }
    }
    return;
  }
  widenWords(plan, (uint64_t)dst, (uint64_t)src);
  int w = plan.wordBytes;
  for (int64_t i = 0; i < plan.total; ++i) {
    int64_t from = fitsIndex32(plan.total) ? sourceOffset(plan, uint32_t(i)) : sourceOffset(plan, uint64_t(i));
    std::memcpy(dst + i * w, src + (plan.base + from) * w, w);
  }
}

/// Runs a strided view through the plan and checks it against the CPU kernel's result.
void checkView(const std::string &op, HostTensor &in, HostTensor &cpu, const std::vector<int64_t> &strides, int64_t base,
               int expectWord = 0, bool expectTiles = false) {
  HostTensor emu(cpu.dtype, cpu.shape);
  StridedCopy plan;
  ASSERT_TRUE(planStridedCopy(cpu.shape, strides, base, (int)dtypeSize(in.dtype), plan));
  TileTranspose t;
  EXPECT_EQ(planTileTranspose(plan, t), expectTiles) << op << shapeString(cpu.shape);
  if (expectWord) {
    StridedCopy widened = plan;
    widenWords(widened, (uint64_t)emu.data(), (uint64_t)in.data());
    EXPECT_EQ(widened.wordBytes, expectWord) << op << shapeString(cpu.shape);
  }
  if (cpu.size() > 0)
    emulateStridedCopy(plan, emu.data(), in.data());
  EXPECT_TRUE(emu == cpu) << op << " " << dtypeName(in.dtype) << shapeString(in.shape) << " -> " << shapeString(cpu.shape);
}

void checkTranspose(DType t, std::vector<int64_t> shape, std::vector<int64_t> perm, bool tiles, int word = 0) {
  std::vector<int64_t> outShape, dims;
  for (int64_t p : perm) {
    int64_t d = p < 0 ? p + (int64_t)shape.size() : p;
    dims.push_back(d);
    outShape.push_back(shape[d]);
  }
  HostTensor in = randomBytes(t, shape, shape.size()), cpu(t, outShape);
  runCpuKernel(OpKind::Transpose, {&in}, {&cpu}, {{"permutation", perm}});
  checkView("transpose", in, cpu, transposeStrides(shape, dims), 0, word, tiles);
}

void checkSlice(DType t, std::vector<int64_t> shape, std::vector<int64_t> starts, std::vector<int64_t> limits,
                std::vector<int64_t> steps, std::vector<int64_t> outShape, int word = 0) {
  HostTensor in = randomBytes(t, shape, 5), cpu(t, outShape);
  runCpuKernel(OpKind::Slice, {&in}, {&cpu}, {{"starts", starts}, {"limits", limits}, {"strides", steps}});
  std::vector<int64_t> first(shape.size());
  for (size_t i = 0; i < shape.size(); ++i)
    first[i] = starts[i] < 0 ? starts[i] + shape[i] : starts[i];
  checkView("slice", in, cpu, sliceStrides(shape, steps), sliceBase(shape, first), word);
}

void checkBroadcast(DType t, std::vector<int64_t> shape, std::vector<int64_t> outShape, int word = 0) {
  HostTensor in = randomBytes(t, shape, 6), cpu(t, outShape);
  runCpuKernel(OpKind::Broadcast, {&in}, {&cpu}, nlohmann::json::object());
  checkView("broadcast", in, cpu, broadcastStrides(shape, outShape), 0, word);
}

void checkConcat(DType t, std::vector<std::vector<int64_t>> shapes, int64_t axis) {
  std::vector<HostTensor> ins;
  std::vector<HostTensor *> ptrs;
  int64_t r = (int64_t)shapes[0].size(), a = axis < 0 ? axis + r : axis;
  std::vector<int64_t> outShape = shapes[0];
  outShape[a] = 0;
  for (size_t k = 0; k < shapes.size(); ++k) {
    ins.push_back(randomBytes(t, shapes[k], 10 + k));
    outShape[a] += shapes[k][a];
  }
  for (HostTensor &b : ins)
    ptrs.push_back(&b);
  HostTensor cpu(t, outShape), emu(t, outShape);
  runCpuKernel(OpKind::Concat, ptrs, {&cpu}, {{"axis", axis}});
  int64_t offset = 0;
  for (HostTensor &in : ins) {
    RowCopy c = concatRows(outShape, a, in.shape, offset, (int)dtypeSize(t));
    offset += in.shape[a];
    if (in.size() == 0)
      continue;
    widenWords(c, (uint64_t)emu.data(), (uint64_t)in.data());
    for (int64_t i = 0; i < c.rows * c.width; ++i)
      std::memcpy(emu.data() + rowCopyTarget(c, i) * c.wordBytes, in.data() + i * c.wordBytes, c.wordBytes);
  }
  EXPECT_TRUE(emu == cpu) << "concat " << dtypeName(t) << shapeString(outShape) << " axis " << axis;
}

void checkPad(DType t, std::vector<int64_t> shape, std::vector<int64_t> low, std::vector<int64_t> high,
              std::vector<int64_t> interior, double value) {
  std::vector<int64_t> outShape(shape.size());
  for (size_t d = 0; d < shape.size(); ++d)
    outShape[d] = low[d] + high[d] + shape[d] + std::max<int64_t>(shape[d] - 1, 0) * interior[d];
  HostTensor in = randomBytes(t, shape, 7), cpu(t, outShape), emu(t, outShape);
  runCpuKernel(OpKind::Pad, {&in}, {&cpu}, {{"low_padding", low}, {"high_padding", high}, {"interior_padding", interior}, {"value", value}});
  PadPlan p;
  ASSERT_TRUE(planPad(shape, outShape, low, interior, p));
  uint64_t fill = padValueBits(t, value);
  size_t w = dtypeSize(t);
  for (int64_t i = 0; i < p.total; ++i) {
    int64_t from = padSource(p, uint32_t(i));
    std::memcpy(emu.data() + i * w, from < 0 ? (const uint8_t *)&fill : in.data() + from * w, w);
  }
  EXPECT_TRUE(emu == cpu) << "pad " << dtypeName(t) << shapeString(shape) << " with " << value;
}

const DType kEveryType[] = {DType::F32, DType::F64, DType::F16, DType::BF16, DType::I64,
                            DType::I32, DType::I16, DType::I8,  DType::U8,   DType::I1};

} // namespace

TEST(MovementMath, PlansMergeContiguousDimsAndDropUnitDims) {
  StridedCopy plan;
  ASSERT_TRUE(planStridedCopy({2, 1, 3, 4}, rowMajorStrides({2, 1, 3, 4}), 0, 4, plan));
  EXPECT_EQ(plan.rank, 1);
  EXPECT_EQ(plan.shape[0], 24);
  ASSERT_TRUE(planStridedCopy({4, 3}, transposeStrides({3, 4}, {1, 0}), 0, 4, plan));
  EXPECT_EQ(plan.rank, 2);
  std::vector<int64_t> many(kMaxCopyDims + 1, 2), strides(kMaxCopyDims + 1, 0);
  for (size_t i = 0; i < strides.size(); i += 2)
    strides[i] = 1; // strides 1, 0, 1, 0, ...: no neighbours merge
  EXPECT_FALSE(planStridedCopy(many, strides, 0, 4, plan));
  EXPECT_TRUE(fitsIndex32((int64_t(1) << 31) - 1));
  EXPECT_FALSE(fitsIndex32(int64_t(1) << 31));
}

TEST(MovementMath, WordsWidenOnlyWhenAligned) {
  StridedCopy plan;
  planStridedCopy({8, 6}, sliceStrides({8, 12}, {1, 1}), 2, 4, plan); // rows of 6 floats, 12 apart
  StridedCopy a = plan;
  widenWords(a, 0, 0);
  EXPECT_EQ(a.wordBytes, 8); // 6 floats are 3 words of 8, not of 16
  EXPECT_EQ(a.shape[1], 3);
  EXPECT_EQ(a.strides[0], 6);
  EXPECT_EQ(a.base, 1);
  StridedCopy b = plan;
  widenWords(b, 0, 4); // a source address off by one float
  EXPECT_EQ(b.wordBytes, 4);
  RowCopy c{2, 8, 24, 8, 2};
  widenWords(c, 0, 0);
  EXPECT_EQ(c.wordBytes, 16);
  EXPECT_EQ(c.width, 1);
}

TEST(MovementMath, TransposeMatchesCpu) {
  checkTranspose(DType::F32, {8, 50, 192}, {0, 2, 1}, true);    // tiles, ragged edges (50)
  checkTranspose(DType::F32, {192, 400}, {1, 0}, true);
  checkTranspose(DType::F32, {2, 3, 4, 5}, {0, 2, 1, 3}, false); // rows of 5 stay contiguous
  checkTranspose(DType::F32, {8, 50, 3, 64}, {0, 2, 1, 3}, false, 16); // heads out: 64-float rows widen
  checkTranspose(DType::F32, {3, 4, 5, 6}, {3, 2, 1, 0}, false); // no contiguous pair: the generic map
  checkTranspose(DType::F32, {3, 4, 5}, {-1, 0, -2}, true);       // negative entries; [5, 3x4] merge to a swap
  checkTranspose(DType::F32, {}, {}, false);                      // a scalar
  for (DType t : kEveryType) {
    checkTranspose(t, {33, 65}, {1, 0}, true);
    checkTranspose(t, {2, 7, 5, 3}, {1, 0, 3, 2}, true);
  }
}

TEST(MovementMath, SliceMatchesCpu) {
  checkSlice(DType::F32, {8, 51, 192}, {0, 1, 0}, {8, 51, 192}, {1, 1, 1}, {8, 50, 192}, 16); // drop the cls token
  checkSlice(DType::F32, {10, 12}, {1, 2}, {9, 12}, {2, 3}, {4, 4});
  checkSlice(DType::F32, {10, 12}, {9, -1}, {0, 0}, {-1, -2}, {9, 6}); // negative steps and start
  checkSlice(DType::F32, {5, 6}, {2, 0}, {2, 6}, {1, 1}, {0, 6});     // empty
  for (DType t : kEveryType) {
    checkSlice(t, {4, 9, 7}, {3, 1, 6}, {0, 9, 0}, {-1, 2, -3}, {3, 4, 3});
    checkSlice(t, {6, 32}, {1, 0}, {5, 32}, {1, 1}, {4, 32});
  }
}

TEST(MovementMath, BroadcastMatchesCpu) {
  checkBroadcast(DType::F32, {1, 192}, {400, 192}, 16);
  checkBroadcast(DType::F32, {192}, {8, 50, 192}, 16);
  checkBroadcast(DType::F32, {3, 1}, {2, 3, 5});
  checkBroadcast(DType::F32, {}, {4, 4});
  for (DType t : kEveryType)
    checkBroadcast(t, {5, 1, 3}, {2, 5, 4, 3});
}

TEST(MovementMath, ConcatMatchesCpu) {
  checkConcat(DType::F32, {{8, 1, 192}, {8, 50, 192}}, 1); // the cls token
  checkConcat(DType::F32, {{2, 3}, {2, 0}, {2, 5}, {2, 1}}, -1);
  checkConcat(DType::F32, {{3, 4}, {1, 4}}, 0);
  for (DType t : kEveryType)
    checkConcat(t, {{2, 3, 4}, {2, 5, 4}, {2, 1, 4}}, 1);
}

TEST(MovementMath, PadMatchesCpu) {
  checkPad(DType::F32, {3, 4}, {1, 2}, {2, 0}, {0, 1}, 0.0);
  checkPad(DType::F32, {2, 3, 4}, {0, 1, 3}, {1, 0, 2}, {2, 0, 1}, -1.5);
  checkPad(DType::F32, {0, 3}, {1, 1}, {1, 0}, {0, 0}, 7.0); // an empty input: all padding
  checkPad(DType::F32, {}, {}, {}, {}, 1.0);                 // a scalar
  for (DType t : kEveryType)
    for (double v : {0.0, 2.5, -3.0, double(INFINITY), -double(INFINITY), 300.0, 1e10})
      checkPad(t, {3, 5}, {1, 0}, {2, 3}, {1, 2}, v);
  for (DType t : {DType::F16, DType::BF16, DType::F32, DType::I32, DType::U8, DType::I1})
    checkPad(t, {4}, {1}, {1}, {0}, std::nan(""));
}

// Tests pad values that round or saturate in the element type.
TEST(MovementMath, PadValuesConvertAsOnTheCpu) {
  for (double v : {0.0, 2.5, 1e10, -1e10, 255.5, -0.5, 300.0})
    for (DType t : {DType::F16, DType::BF16, DType::I8, DType::U8, DType::I64})
      checkPad(t, {1}, {1}, {0}, {0}, v);
}
