//===- IndexingMathTest.cpp - the CUDA indexing kernels' arithmetic on the host ===//
//
// Runs gather, gather_elements, their gradients, scatter_nd, topk and argsort as the CUDA kernels
// do (index maps, targets sorted stably by key as the radix sort does, one walker per run of a
// target, the per-column walks, the bitonic network) and compares with the CPU kernels: sums are
// taken in the CPU kernels' order, so results must be identical, bit for bit.
//
#include "kernels/Tensor.h" // rowMajorStrides
#include "kernels/cuda/IndexingLaunch.h"
#include "kernels/cuda/IndexingMath.h"
#include "kernels/cuda/NormalizationMath.h" // RowShape
#include "tests/unit/cuda/CudaTestUtil.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

using namespace cpc;
using namespace cpc::kernels;
using namespace cpc::kernels::cuda;
using namespace cpc::cudatest;

namespace {

uint64_t nextRandom(uint64_t &x) {
  x ^= x << 13, x ^= x >> 7, x ^= x << 17;
  return x >> 11;
}

/// Values that exercise ties: small integers (and halves for floats), a few NaNs when asked.
HostTensor randomValues(DType t, std::vector<int64_t> shape, uint64_t seed, int spread = 7, bool nans = false) {
  HostTensor b(t, std::move(shape));
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 5;
  bool isFloat = isFloatDType(t);
  for (int64_t i = 0; i < b.numel(); ++i) {
    int64_t r = int64_t(nextRandom(x) % (2 * spread + 1)) - spread;
    double v = isFloat ? r * 0.5 : double(t == DType::U8 ? r + spread : t == DType::I1 ? (r & 1) : r);
    if (nans && isFloat && nextRandom(x) % 9 == 0)
      v = std::nan("");
    b.setValue(i, v);
  }
  return b;
}

/// Indices in [-global, global) (negatives wrap), as i64 or i32.
HostTensor randomIndices(DType t, std::vector<int64_t> shape, int64_t global, uint64_t seed) {
  HostTensor b(t, std::move(shape));
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 17;
  for (int64_t i = 0; i < b.numel(); ++i)
    b.setValue(i, double(int64_t(nextRandom(x) % (2 * global)) - global));
  return b;
}

/// A step's context on the CPU, as rank `rank` of a dp=2 x tp=2 mesh (for block_axes).
struct Step {
  std::vector<int64_t> meshShape = {2, 2};
  std::vector<std::string> meshAxes = {"dp", "tp"};
  KernelContext ctx;
  Step(OpKind op, const std::vector<HostTensor *> &ins, const std::vector<HostTensor *> &outs,
       const nlohmann::json &attrs, int rank = 0)
      : ctx(hostContext(op, ins, outs, attrs)) {
    ctx.rank = rank;
    ctx.meshShape = &meshShape;
    ctx.meshAxes = &meshAxes;
  }
  void runCpu() { runCpuKernel(ctx); }
  IndexRange range(int64_t local) {
    IndexBlock b = indexBlock(ctx, local);
    return {b.offset, b.local, b.global};
  }
};

void expectSameBytes(const HostTensor &cpu, const HostTensor &emu, const std::string &what) {
  int64_t bad = 0;
  size_t es = dtypeSize(cpu.dtype);
  for (int64_t i = 0; i < cpu.numel(); ++i)
    if (std::memcmp(cpu.data() + i * es, emu.data() + i * es, es) != 0 && bad++ < 5)
      ADD_FAILURE() << what << " element " << i << ": cpu " << cpu.value(i) << ", emulated " << emu.value(i);
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << cpu.numel() << " elements differ";
}

int64_t indexAt(const HostTensor &indices, int64_t i) { return int64_t(indices.value(i)); }

ElementsMap elementsMapOf(const std::vector<int64_t> &shape, const std::vector<int64_t> &strides, int64_t axis) {
  ElementsMap m;
  m.rank = (int)shape.size();
  m.axis = (int)axis;
  for (int d = 0; d < m.rank; ++d)
    m.shape[d] = shape[d], m.strides[d] = strides[d];
  return m;
}

/// What the radix sort leaves: positions ordered by key, equal keys in position order.
std::vector<int32_t> sortedPositions(const std::vector<uint32_t> &keys) {
  std::vector<int32_t> order(keys.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return keys[a] < keys[b]; });
  return order;
}

/// The kernels' arithmetic type for a storage type: f32 for 16-bit floats, else the type itself.
template <typename F> void withAccType(DType t, F &&f) {
  switch (t) {
  case DType::F64: return f(double{});
  case DType::F32: case DType::F16: case DType::BF16: return f(float{});
  case DType::I64: return f(int64_t{});
  case DType::I32: return f(int32_t{});
  case DType::I16: return f(int16_t{});
  case DType::I8: return f(int8_t{});
  case DType::U8: case DType::I1: return f(uint8_t{});
  }
}

const DType kEveryType[] = {DType::F32, DType::F64, DType::F16, DType::BF16, DType::I64,
                            DType::I32, DType::I16, DType::I8,  DType::U8,   DType::I1};
const DType kFloatTypes[] = {DType::F32, DType::F64, DType::F16, DType::BF16};

//===----------------------------------------------------------------------===//
// gather and gather_elements
//===----------------------------------------------------------------------===//

void checkGather(DType t, std::vector<int64_t> dataShape, std::vector<int64_t> indexShape, int64_t axis,
                 DType indexType = DType::I64, int rank = -1) {
  int64_t a = axis < 0 ? axis + (int64_t)dataShape.size() : axis;
  int64_t global = dataShape[a] * (rank < 0 ? 1 : 2);
  HostTensor data = randomValues(t, dataShape, 3, 100), indices = randomIndices(indexType, indexShape, global, 4);
  std::vector<int64_t> outShape(dataShape.begin(), dataShape.begin() + a);
  outShape.insert(outShape.end(), indexShape.begin(), indexShape.end());
  outShape.insert(outShape.end(), dataShape.begin() + a + 1, dataShape.end());
  HostTensor cpu(t, outShape), emu(t, outShape);
  nlohmann::json attrs = {{"axis", axis}};
  if (rank >= 0)
    attrs["block_axes"] = {"tp"};
  Step step(OpKind::Gather, {&data, &indices}, {&cpu}, attrs, std::max(rank, 0));
  step.runCpu();
  GatherShape g{indices.numel(), dataShape[a], numElements({dataShape.begin() + a + 1, dataShape.end()})};
  IndexRange r = step.range(g.size);
  size_t es = dtypeSize(t);
  for (int64_t e = 0; e < emu.numel(); ++e) {
    GatherCoord c = gatherCoord(g, e);
    int64_t p = localIndex(indexAt(indices, c.i), r);
    if (p >= 0)
      std::memcpy(emu.data() + e * es, data.data() + gatherSource(g, c, p) * es, es);
  }
  expectSameBytes(cpu, emu, "gather " + std::string(dtypeName(t)) + shapeString(dataShape));
}

void checkGatherElements(DType t, std::vector<int64_t> dataShape, std::vector<int64_t> indexShape, int64_t axis,
                         int rank = -1) {
  int64_t a = axis < 0 ? axis + (int64_t)dataShape.size() : axis;
  int64_t global = dataShape[a] * (rank < 0 ? 1 : 2);
  HostTensor data = randomValues(t, dataShape, 5, 100), indices = randomIndices(DType::I64, indexShape, global, 6);
  HostTensor cpu(t, indexShape), emu(t, indexShape);
  nlohmann::json attrs = {{"axis", axis}};
  if (rank >= 0)
    attrs["block_axes"] = {"tp"};
  Step step(OpKind::GatherElements, {&data, &indices}, {&cpu}, attrs, std::max(rank, 0));
  step.runCpu();
  ElementsMap m = elementsMapOf(indexShape, rowMajorStrides(dataShape), a);
  IndexRange r = step.range(dataShape[a]);
  size_t es = dtypeSize(t);
  for (int64_t e = 0; e < emu.numel(); ++e) {
    int64_t p = localIndex(indexAt(indices, e), r);
    if (p >= 0)
      std::memcpy(emu.data() + e * es, data.data() + elementsOffset(m, e, p) * es, es);
  }
  expectSameBytes(cpu, emu, "gather_elements " + std::string(dtypeName(t)) + shapeString(dataShape));
}

//===----------------------------------------------------------------------===//
// The gradients and scatter_nd
//===----------------------------------------------------------------------===//

void checkGatherGrad(DType t, std::vector<int64_t> outShape, std::vector<int64_t> indexShape, int64_t axis,
                     int rank = -1) {
  int64_t a = axis < 0 ? axis + (int64_t)outShape.size() : axis;
  int64_t global = outShape[a] * (rank < 0 ? 1 : 2);
  std::vector<int64_t> gradShape(outShape.begin(), outShape.begin() + a);
  gradShape.insert(gradShape.end(), indexShape.begin(), indexShape.end());
  gradShape.insert(gradShape.end(), outShape.begin() + a + 1, outShape.end());
  HostTensor grad = randomValues(t, gradShape, 7), indices = randomIndices(DType::I32, indexShape, global, 8);
  for (int64_t i = 0; i < grad.numel(); ++i) // values whose sums round: order matters
    grad.setValue(i, grad.value(i) * 1.37 + 1e-3 * i);
  HostTensor cpu(t, outShape), emu(t, outShape);
  nlohmann::json attrs = {{"axis", axis}, {"dim_size", outShape[a]}};
  if (rank >= 0)
    attrs["block_axes"] = {"tp"};
  Step step(OpKind::GatherGrad, {&grad, &indices}, {&cpu}, attrs, std::max(rank, 0));
  step.runCpu();
  GatherShape g{indices.numel(), outShape[a], numElements({outShape.begin() + a + 1, outShape.end()})};
  IndexRange r = step.range(g.size);
  std::vector<uint32_t> keys(g.n);
  for (int64_t i = 0; i < g.n; ++i)
    keys[i] = targetKey(localIndex(indexAt(indices, i), r), r.local);
  std::vector<int32_t> positions = sortedPositions(keys);
  std::vector<uint32_t> sortedKeys(g.n);
  for (int64_t s = 0; s < g.n; ++s)
    sortedKeys[s] = keys[positions[s]];
  withAccType(t, [&](auto zero) {
    using Acc = decltype(zero);
    for (int64_t e = 0; e < grad.numel(); ++e) {
      GatherCoord c = gatherCoord(g, e);
      uint32_t key = sortedKeys[c.i];
      if (key >= g.size || !segmentHead(sortedKeys.data(), c.i))
        continue;
      Acc sum = 0;
      for (int64_t s = c.i; s < g.n && sortedKeys[s] == key; ++s)
        sum += Acc(grad.value((c.o * g.n + positions[s]) * g.inner + c.k));
      emu.setValue(gatherSource(g, c, key), sum);
    }
  });
  expectSameBytes(cpu, emu, "gather_grad " + std::string(dtypeName(t)) + shapeString(outShape));
}

void checkGatherElementsGrad(DType t, std::vector<int64_t> outShape, std::vector<int64_t> indexShape, int64_t axis,
                             int rank = -1) {
  int64_t a = axis < 0 ? axis + (int64_t)outShape.size() : axis;
  int64_t global = outShape[a] * (rank < 0 ? 1 : 2);
  HostTensor grad = randomValues(t, indexShape, 9), indices = randomIndices(DType::I64, indexShape, global, 10);
  for (int64_t i = 0; i < grad.numel(); ++i)
    grad.setValue(i, grad.value(i) * 1.37 + 1e-3 * i);
  HostTensor cpu(t, outShape), emu(t, outShape);
  nlohmann::json attrs = {{"axis", axis}};
  if (rank >= 0)
    attrs["block_axes"] = {"tp"};
  Step step(OpKind::GatherElementsGrad, {&grad, &indices}, {&cpu}, attrs, std::max(rank, 0));
  step.runCpu();
  ElementsMap m = elementsMapOf(indexShape, rowMajorStrides(outShape), a);
  IndexRange r = step.range(outShape[a]);
  int64_t outer = numElements({indexShape.begin(), indexShape.begin() + a}), len = indexShape[a];
  int64_t inner = numElements({indexShape.begin() + a + 1, indexShape.end()});
  withAccType(t, [&](auto zero) {
    using Acc = decltype(zero);
    std::vector<Acc> sums(emu.numel(), Acc(0));
    for (int64_t column = 0; column < outer * inner; ++column) {
      int64_t o = column / inner, k = column % inner;
      for (int64_t j = 0; j < len; ++j) {
        int64_t e = (o * len + j) * inner + k, p = localIndex(indexAt(indices, e), r);
        if (p >= 0)
          sums[elementsOffset(m, e, p)] += Acc(grad.value(e));
      }
    }
    for (int64_t i = 0; i < emu.numel(); ++i)
      emu.setValue(i, sums[i]);
  });
  expectSameBytes(cpu, emu, "gather_elements_grad " + std::string(dtypeName(t)) + shapeString(outShape));
}

/// Stores v as element i: floats rounded once to the storage type, integers as their bits.
template <typename T> void setBits(HostTensor &b, int64_t i, T v) {
  if constexpr (std::is_floating_point_v<T>)
    b.setValue(i, double(v)); // rounds once to 16-bit storage
  else
    b.store(i, v);
}

void checkScatterND(DType t, std::vector<int64_t> dataShape, std::vector<int64_t> indexShape, ScatterReduction red,
                    const char *reduction) {
  int64_t q = indexShape.back();
  std::vector<int64_t> updShape(indexShape.begin(), indexShape.end() - 1);
  updShape.insert(updShape.end(), dataShape.begin() + q, dataShape.end());
  HostTensor data = randomValues(t, dataShape, 11, 3, true), updates = randomValues(t, updShape, 12, 3, true);
  HostTensor indices(DType::I64, indexShape);
  uint64_t x = 13;
  int64_t tuples = numElements(updShape) / std::max<int64_t>(1, numElements({dataShape.begin() + q, dataShape.end()}));
  for (int64_t tup = 0; tup < tuples; ++tup)
    for (int64_t d = 0; d < q; ++d) // few distinct targets: many duplicates, some negative
      indices.setValue(tup * q + d, double(int64_t(nextRandom(x) % (2 * std::min<int64_t>(dataShape[d], 2))) -
                                      std::min<int64_t>(dataShape[d], 2)));
  HostTensor cpu(t, dataShape), emu = data;
  Step step(OpKind::ScatterND, {&data, &indices, &updates}, {&cpu}, {{"reduction", reduction}});
  step.runCpu();
  if (t == DType::I1)
    red = red == ScatterReduction::Add ? ScatterReduction::Max : red == ScatterReduction::Mul ? ScatterReduction::Min : red;
  ScatterDims dims;
  dims.q = (int)q;
  for (int d = 0; d < q; ++d)
    dims.shape[d] = dataShape[d];
  int64_t slots = numElements({dataShape.begin(), dataShape.begin() + q});
  int64_t slice = numElements({dataShape.begin() + q, dataShape.end()});
  std::vector<uint32_t> keys(tuples);
  std::vector<int64_t> idx(indices.numel());
  for (int64_t i = 0; i < indices.numel(); ++i)
    idx[i] = indexAt(indices, i);
  for (int64_t tup = 0; tup < tuples; ++tup)
    keys[tup] = targetKey(scatterSlot(dims, idx.data() + tup * q), slots);
  std::vector<int32_t> positions = sortedPositions(keys);
  std::vector<uint32_t> sortedKeys(tuples);
  for (int64_t s = 0; s < tuples; ++s)
    sortedKeys[s] = keys[positions[s]];
  withAccType(t, [&](auto zero) {
    using Acc = decltype(zero);
    auto value = [&](const HostTensor &b, int64_t i) {
      if constexpr (std::is_floating_point_v<Acc>)
        return Acc(b.value(i));
      else // integers: the stored bits, not a double's rounding of int64
        return b.load<Acc>(i);
    };
    for (int64_t e = 0; e < tuples * slice; ++e) {
      int64_t s = e / slice, k = e % slice;
      uint32_t key = sortedKeys[s];
      if (key >= slots || !segmentHead(sortedKeys.data(), s))
        continue;
      Acc v = value(emu, key * slice + k);
      for (int64_t u = s; u < tuples && sortedKeys[u] == key; ++u)
        v = scatterCombine(v, value(updates, positions[u] * slice + k), red);
      setBits(emu, key * slice + k, v);
    }
  });
  expectSameBytes(cpu, emu, std::string("scatter_nd ") + reduction + " " + dtypeName(t) + shapeString(dataShape));
}

//===----------------------------------------------------------------------===//
// topk and argsort
//===----------------------------------------------------------------------===//

/// Sorts each row with the bitonic network as sortRowsKernel does; returns every row's positions
/// ([outer, keep, inner] order).
template <typename K>
std::vector<int64_t> emulateSortRows(const HostTensor &in, int64_t axis, int64_t keep, bool descending) {
  RowShape shape = rowShapeAlong(in.shape, axis);
  SortLaunch l = sortLaunch(shape.len, sizeof(K));
  EXPECT_TRUE(l.fits);
  std::vector<int64_t> out(shape.rows / shape.inner * keep * shape.inner);
  std::vector<K> keys(l.padded);
  std::vector<int32_t> index(l.padded);
  for (int64_t row = 0; row < shape.rows; ++row) {
    int64_t base = rowBase(shape, row);
    for (int t = 0; t < l.padded; ++t) {
      keys[t] = t < shape.len ? K(in.value(base + t * shape.inner)) : K(0);
      index[t] = t;
    }
    for (int size = 2; size <= l.padded; size *= 2)
      for (int stride = size / 2; stride > 0; stride /= 2)
        for (int t = 0; t < l.padded / 2; ++t)
          bitonicStep(keys.data(), index.data(), t, size, stride, descending, (int32_t)shape.len);
    int64_t outBase = (row / shape.inner) * keep * shape.inner + row % shape.inner;
    for (int64_t j = 0; j < keep; ++j)
      out[outBase + j * shape.inner] = index[j];
  }
  return out;
}

template <typename F> void withKeyType(DType t, F &&f) {
  if (t == DType::F64)
    return f(double{});
  if (isFloatDType(t))
    return f(float{});
  withAccType(t, f); // integers: the value (exact in a double, as get returns it)
}

void checkTopK(DType t, std::vector<int64_t> shape, int64_t axis, int64_t k, bool largest) {
  int64_t a = axis < 0 ? axis + (int64_t)shape.size() : axis;
  HostTensor in = randomValues(t, shape, 21 + k, 5, true);
  std::vector<int64_t> outShape = shape;
  outShape[a] = k;
  HostTensor values(t, outShape), positions(DType::I64, outShape);
  Step step(OpKind::TopK, {&in}, {&values, &positions}, {{"axis", axis}, {"k", k}, {"largest", largest}});
  step.runCpu();
  withKeyType(t, [&](auto zero) {
    std::vector<int64_t> got = emulateSortRows<decltype(zero)>(in, a, k, largest);
    ASSERT_EQ(got.size(), (size_t)positions.numel());
    RowShape shapeOf{0, shape[a], numElements({shape.begin() + a + 1, shape.end()})};
    HostTensor emuValues(t, outShape);
    size_t es = dtypeSize(t);
    for (int64_t i = 0; i < positions.numel(); ++i) {
      EXPECT_EQ(got[i], positions.as<int64_t>()[i]) << "topk " << dtypeName(t) << shapeString(shape) << " at " << i;
      int64_t o = i / (k * shapeOf.inner), inner = i % shapeOf.inner;
      std::memcpy(emuValues.data() + i * es, in.data() + ((o * shapeOf.len + got[i]) * shapeOf.inner + inner) * es, es);
    }
    expectSameBytes(values, emuValues, "topk values " + std::string(dtypeName(t)));
  });
}

void checkArgsort(DType t, std::vector<int64_t> shape, int64_t axis, bool descending) {
  int64_t a = axis < 0 ? axis + (int64_t)shape.size() : axis;
  HostTensor in = randomValues(t, shape, 31, 4, true), positions(DType::I64, shape);
  Step step(OpKind::ArgSort, {&in}, {&positions}, {{"axis", axis}, {"descending", descending}});
  step.runCpu();
  withKeyType(t, [&](auto zero) {
    std::vector<int64_t> got = emulateSortRows<decltype(zero)>(in, a, shape[a], descending);
    std::vector<int64_t> want(positions.as<int64_t>(), positions.as<int64_t>() + positions.numel());
    EXPECT_EQ(got, want) << "argsort " << dtypeName(t) << shapeString(shape) << " axis " << axis
                         << (descending ? " descending" : "");
  });
}

} // namespace

TEST(IndexingMath, LocalIndicesWrapAndHonourTheBlock) {
  IndexRange whole{0, 5, 5}, second{4, 4, 8};
  EXPECT_EQ(localIndex(-1, whole), 4);
  EXPECT_EQ(localIndex(5, whole), kOutOfRange);
  EXPECT_EQ(localIndex(-6, whole), kOutOfRange);
  EXPECT_EQ(localIndex(3, second), kOutsideBlock);
  EXPECT_EQ(localIndex(-1, second), 3);
  EXPECT_EQ(targetKey(kOutsideBlock, 4), 4u);
  EXPECT_EQ(targetKey(2, 4), 2u);
}

TEST(IndexingMath, SortLaunchesFitSharedMemory) {
  for (int64_t len : {1, 2, 3, 31, 33, 1000, 1024, 1025, 4095, 4096}) {
    for (size_t keyBytes : {1, 2, 4, 8}) {
      SortLaunch l = sortLaunch(len, keyBytes);
      EXPECT_TRUE(l.fits) << len;
      EXPECT_GE(l.padded, len);
      EXPECT_LT(l.padded, 2 * std::max<int64_t>(len, 1));
      EXPECT_EQ(l.padded & (l.padded - 1), 0);
      EXPECT_LE(l.sharedBytes, kDefaultSharedBytes);
      EXPECT_LE(l.threads, kMaxThreadsPerBlock);
      EXPECT_GE(l.threads, kWarpSize);
    }
  }
  EXPECT_FALSE(sortLaunch(4097, 4).fits);
  EXPECT_EQ(radixBits(0), 1);
  EXPECT_EQ(radixBits(1), 1);
  EXPECT_EQ(radixBits(2), 2);
  EXPECT_EQ(radixBits(50257), 16);
  EXPECT_EQ(radixBits(0xffffffffu), 32);
  SortScratch s = sortScratch(1001, 77);
  EXPECT_EQ(s.keysOut % 256, 0u);
  EXPECT_GE(s.keysOut, 1001 * 4u);
  EXPECT_GE(s.positionsIn - s.keysOut, 1001 * 4u);
  EXPECT_GE(s.temp - s.positionsOut, 1001 * 4u);
  EXPECT_GE(s.total - s.temp, 77u);
}

TEST(IndexingMath, GatherMatchesCpu) {
  checkGather(DType::F32, {50, 192}, {8, 17}, 0);           // an embedding lookup
  checkGather(DType::F32, {4, 6, 3}, {5}, 1, DType::I32);
  checkGather(DType::F32, {4, 6, 3}, {2, 2}, -1);
  checkGather(DType::F32, {7, 3}, {}, 0);                    // a scalar index
  for (DType t : kEveryType)
    checkGather(t, {3, 5, 2}, {4}, 1);
}

TEST(IndexingMath, GatherElementsMatchesCpu) {
  checkGatherElements(DType::F32, {8, 10}, {8, 1}, 1);       // the target logit
  checkGatherElements(DType::F32, {4, 5, 6}, {3, 7, 2}, 1);
  checkGatherElements(DType::F32, {4, 5, 6}, {4, 5, 6}, -1);
  for (DType t : kEveryType)
    checkGatherElements(t, {3, 4}, {3, 6}, 1);
}

TEST(IndexingMath, GatherWithBlockAxesMatchesCpu) {
  for (int rank = 0; rank < 4; ++rank) {
    checkGather(DType::F32, {6, 4}, {9}, 0, DType::I64, rank);
    checkGatherElements(DType::F32, {3, 4}, {3, 5}, 1, rank);
    checkGatherGrad(DType::F32, {6, 4}, {9}, 0, rank);
    checkGatherElementsGrad(DType::F32, {3, 4}, {3, 5}, 1, rank);
  }
}

TEST(IndexingMath, GatherGradMatchesCpuBitForBit) {
  checkGatherGrad(DType::F32, {50, 192}, {8, 17}, 0);  // embedding gradient with repeats
  checkGatherGrad(DType::F32, {4, 6, 3}, {40}, 1);
  checkGatherGrad(DType::F32, {5, 3}, {}, 0);
  checkGatherGrad(DType::F32, {5, 3}, {0}, 0);         // no indices: zeros
  for (DType t : kFloatTypes)
    checkGatherGrad(t, {3, 5, 2}, {30}, -2);
}

TEST(IndexingMath, GatherElementsGradMatchesCpuBitForBit) {
  checkGatherElementsGrad(DType::F32, {8, 10}, {8, 1}, 1);
  checkGatherElementsGrad(DType::F32, {4, 5, 6}, {3, 30, 2}, 1);
  checkGatherElementsGrad(DType::F32, {4, 5, 6}, {4, 5, 40}, -1);
  for (DType t : kFloatTypes)
    checkGatherElementsGrad(t, {3, 4}, {3, 20}, 1);
}

TEST(IndexingMath, ScatterNDMatchesCpuWithDuplicates) {
  const std::pair<ScatterReduction, const char *> reductions[] = {{ScatterReduction::None, "none"},
                                                                  {ScatterReduction::Add, "add"},
                                                                  {ScatterReduction::Mul, "mul"},
                                                                  {ScatterReduction::Max, "max"},
                                                                  {ScatterReduction::Min, "min"}};
  for (auto [red, name] : reductions) {
    for (DType t : kEveryType) {
      checkScatterND(t, {4, 3, 2}, {20, 1}, red, name); // slices of [3, 2]
      checkScatterND(t, {4, 3}, {6, 5, 2}, red, name);  // elements
    }
    checkScatterND(DType::F32, {4, 3}, {3, 0}, red, name); // empty tuples: the whole tensor
  }
}

TEST(IndexingMath, TopKMatchesCpu) {
  for (bool largest : {true, false}) {
    checkTopK(DType::F32, {8, 1000}, 1, 5, largest);
    checkTopK(DType::F32, {6, 33, 4}, 1, 33, largest);
    checkTopK(DType::F32, {17, 3}, 0, 4, largest); // along a dim that is not last
    checkTopK(DType::F32, {2, 4096}, 1, 3, largest);
    for (DType t : kEveryType)
      checkTopK(t, {3, 50}, -1, 7, largest);
  }
}

TEST(IndexingMath, ArgsortMatchesCpuWithTiesAndNaNs) {
  for (bool descending : {false, true}) {
    checkArgsort(DType::F32, {5, 100}, 1, descending);
    checkArgsort(DType::F32, {40, 3}, 0, descending);
    checkArgsort(DType::F32, {1, 1}, 0, descending);
    checkArgsort(DType::F64, {2, 3000}, 1, descending);
    for (DType t : kEveryType)
      checkArgsort(t, {4, 37}, 1, descending);
  }
}
