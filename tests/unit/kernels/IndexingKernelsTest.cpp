//===- IndexingKernelsTest.cpp - gather, scatter_nd, topk, argsort --------===//
#include "kernels/cpu/Kernel.h"
#include "tests/unit/kernels/KernelTestUtil.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

using namespace cpc;
using namespace cpc::kernels;
using namespace cpc::kernels::testing;

namespace {

} // namespace

TEST(IndexingKernels, GatherAxis1WithNegativeIndices) {
  std::vector<float> data(2 * 4 * 3);
  std::iota(data.begin(), data.end(), 0.f);
  std::vector<int64_t> idx = {3, -4, -1, 1}; // shape [2,2]
  std::vector<float> out(2 * 2 * 2 * 3);
  run(OpKind::Gather, {ref(data, {2, 4, 3}, DType::F32), ref(idx, {2, 2}, DType::I64)},
      {ref(out, {2, 2, 2, 3}, DType::F32)}, {{"axis", 1}});
  std::vector<float> want;
  for (int o = 0; o < 2; ++o)
    for (int i : {3, 0, 3, 1})
      for (int k = 0; k < 3; ++k)
        want.push_back(float(o * 12 + i * 3 + k));
  EXPECT_EQ(out, want);
}

TEST(IndexingKernels, GatherScalarIndexAndI32) {
  std::vector<int64_t> data = {10, 11, 12, 20, 21, 22}; // [2,3]
  std::vector<int32_t> idx = {-1};                       // rank 0
  std::vector<int64_t> out(2);
  run(OpKind::Gather, {ref(data, {2, 3}, DType::I64), ref(idx, {}, DType::I32)},
      {ref(out, {2}, DType::I64)}, {{"axis", 1}});
  EXPECT_EQ(out, (std::vector<int64_t>{12, 22}));

  std::vector<int64_t> row(3), idx0 = {1};
  run(OpKind::Gather, {ref(data, {2, 3}, DType::I64), ref(idx0, {}, DType::I64)},
      {ref(row, {3}, DType::I64)}, {{"axis", 0}});
  EXPECT_EQ(row, (std::vector<int64_t>{20, 21, 22}));
}

TEST(IndexingKernels, GatherOutOfRangeFails) {
  std::vector<float> data(6), out(2 * 2);
  std::vector<int64_t> idx = {0, 3};
  try {
    run(OpKind::Gather, {ref(data, {2, 3}, DType::F32), ref(idx, {2}, DType::I64)},
        {ref(out, {2, 2}, DType::F32)}, {{"axis", 1}});
    FAIL() << "expected an error";
  } catch (const RuntimeError &e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(opName(OpKind::Gather)), std::string::npos) << msg;
    EXPECT_NE(msg.find("index 3"), std::string::npos) << msg;
    EXPECT_NE(msg.find("dim 1"), std::string::npos) << msg;
  }
  idx = {0, -4};
  EXPECT_THROW(run(OpKind::Gather, {ref(data, {2, 3}, DType::F32), ref(idx, {2}, DType::I64)},
                   {ref(out, {2, 2}, DType::F32)}, {{"axis", 1}}),
               RuntimeError);
}

TEST(IndexingKernels, GatherElements) {
  std::vector<float> data = {1, 2, 3, 4, 5, 6}; // [2,3]
  std::vector<int64_t> idx = {2, 0, -2, 1};     // [2,2] along axis 1
  std::vector<float> out(4);
  run(OpKind::GatherElements, {ref(data, {2, 3}, DType::F32), ref(idx, {2, 2}, DType::I64)},
      {ref(out, {2, 2}, DType::F32)}, {{"axis", 1}});
  EXPECT_EQ(out, (std::vector<float>{3, 1, 5, 5}));

  std::vector<int32_t> idx0 = {1, 0, 1}; // [1,3] along axis 0
  std::vector<float> out0(3);
  run(OpKind::GatherElements, {ref(data, {2, 3}, DType::F32), ref(idx0, {1, 3}, DType::I32)},
      {ref(out0, {1, 3}, DType::F32)}, {{"axis", 0}});
  EXPECT_EQ(out0, (std::vector<float>{4, 2, 6}));

  idx0 = {2, 0, 0};
  EXPECT_THROW(run(OpKind::GatherElements, {ref(data, {2, 3}, DType::F32), ref(idx0, {1, 3}, DType::I32)},
                   {ref(out0, {1, 3}, DType::F32)}, {{"axis", 0}}),
               RuntimeError);
}

// Tests rank-3 gathers along each axis against element-by-element indexing, with index dims
// smaller than the data's off the axis, negative indices, every element size the kernel moves
// (1, 2, 4 and 8 bytes) and, for the largest, enough elements to split rows over threads.
TEST(IndexingKernels, GatherElementsRank3MatchesElementwiseIndexing) {
  struct Case {
    std::vector<int64_t> dshape, ishape;
    int64_t axis;
  };
  std::vector<Case> cases = {{{3, 5, 4}, {2, 6, 3}, 1}, {{3, 5, 4}, {4, 2, 4}, 0}, {{3, 5, 4}, {3, 5, 7}, 2},
                             {{4, 50, 400}, {4, 70, 300}, 1}};
  auto check = [](const Case &c, auto word, DType dtype) {
    using W = decltype(word);
    int64_t dn = c.dshape[0] * c.dshape[1] * c.dshape[2], in = c.ishape[0] * c.ishape[1] * c.ishape[2];
    std::vector<W> data(dn);
    for (int64_t e = 0; e < dn; ++e)
      data[e] = W(e * 2654435761u);
    std::vector<int64_t> idx(in);
    int64_t size = c.dshape[c.axis];
    for (int64_t e = 0; e < in; ++e)
      idx[e] = (e * 7 + 3) % (2 * size) - size; // every value in [-size, size)
    std::vector<W> out(in), want(in);
    for (int64_t i = 0; i < c.ishape[0]; ++i)
      for (int64_t j = 0; j < c.ishape[1]; ++j)
        for (int64_t k = 0; k < c.ishape[2]; ++k) {
          int64_t e = (i * c.ishape[1] + j) * c.ishape[2] + k, at = idx[e] < 0 ? idx[e] + size : idx[e];
          int64_t co[3] = {i, j, k};
          co[c.axis] = at;
          want[e] = data[(co[0] * c.dshape[1] + co[1]) * c.dshape[2] + co[2]];
        }
    run(OpKind::GatherElements, {ref(data, c.dshape, dtype), ref(idx, c.ishape, DType::I64)}, {ref(out, c.ishape, dtype)},
        {{"axis", c.axis}});
    EXPECT_EQ(out, want) << "axis " << c.axis << ", " << dtypeName(dtype);
  };
  for (const Case &c : cases) {
    check(c, uint8_t{}, DType::U8);
    check(c, uint16_t{}, DType::BF16);
    check(c, uint32_t{}, DType::I32);
    check(c, uint64_t{}, DType::F64);
  }
}

TEST(IndexingKernels, ScatterNDReplaceAndAdd) {
  // data [3,2,2]; indices [2,1] select whole [2,2] slices; then [2,2] select single elements.
  std::vector<float> data(12);
  std::iota(data.begin(), data.end(), 0.f);
  std::vector<int64_t> idx = {2, -3};
  std::vector<float> upd = {100, 101, 102, 103, 200, 201, 202, 203}, out(12);
  run(OpKind::ScatterND,
      {ref(data, {3, 2, 2}, DType::F32), ref(idx, {2, 1}, DType::I64), ref(upd, {2, 2, 2}, DType::F32)},
      {ref(out, {3, 2, 2}, DType::F32)}, {{"reduction", "none"}});
  EXPECT_EQ(out, (std::vector<float>{200, 201, 202, 203, 4, 5, 6, 7, 100, 101, 102, 103}));

  std::vector<int64_t> idx2 = {0, 1, 0, 1, 2, 0}; // [3,2], a duplicate tuple accumulates
  std::vector<float> upd2 = {10, 20, 30, 40, 50, 60}, out2(12);                 // [3,2]
  run(OpKind::ScatterND,
      {ref(data, {3, 2, 2}, DType::F32), ref(idx2, {3, 2}, DType::I64), ref(upd2, {3, 2}, DType::F32)},
      {ref(out2, {3, 2, 2}, DType::F32)}, {{"reduction", "add"}});
  EXPECT_EQ(out2, (std::vector<float>{0, 1, 2 + 10 + 30, 3 + 20 + 40, 4, 5, 6, 7, 8 + 50, 9 + 60, 10, 11}));

  std::vector<int32_t> iv = {1, 1}; // mul on i32, [1,2] full index tuple
  std::vector<int32_t> d3 = {1, 2, 3, 4}, u3 = {5}, o3(4);
  run(OpKind::ScatterND, {ref(d3, {2, 2}, DType::I32), ref(iv, {1, 2}, DType::I32), ref(u3, {1}, DType::I32)},
      {ref(o3, {2, 2}, DType::I32)}, {{"reduction", "mul"}});
  EXPECT_EQ(o3, (std::vector<int32_t>{1, 2, 3, 20}));

  idx = {3, 0};
  EXPECT_THROW(run(OpKind::ScatterND,
                   {ref(data, {3, 2, 2}, DType::F32), ref(idx, {2, 1}, DType::I64),
                    ref(upd, {2, 2, 2}, DType::F32)},
                   {ref(out, {3, 2, 2}, DType::F32)}, nlohmann::json::object()),
               RuntimeError);
}

TEST(IndexingKernels, TopKLargestAndSmallestWithTies) {
  std::vector<float> in = {3, 1, 3, 2, 5, 1}; // one row of 6
  std::vector<float> v(3);
  std::vector<int64_t> i(3);
  run(OpKind::TopK, {ref(in, {6}, DType::F32)}, {ref(v, {3}, DType::F32), ref(i, {3}, DType::I64)},
      {{"k", 3}, {"axis", 0}, {"largest", true}, {"sorted", true}});
  EXPECT_EQ(v, (std::vector<float>{5, 3, 3}));
  EXPECT_EQ(i, (std::vector<int64_t>{4, 0, 2}));

  run(OpKind::TopK, {ref(in, {6}, DType::F32)}, {ref(v, {3}, DType::F32), ref(i, {3}, DType::I64)},
      {{"k", 3}, {"axis", -1}, {"largest", false}, {"sorted", true}});
  EXPECT_EQ(v, (std::vector<float>{1, 1, 2}));
  EXPECT_EQ(i, (std::vector<int64_t>{1, 5, 3}));
}

TEST(IndexingKernels, TopKAlongAxis0FullAndNaN) {
  // [3,2], k = 3 = full length along axis 0: an argsort of each column.
  std::vector<int32_t> in = {4, 7, 9, 7, 4, 1};
  std::vector<int32_t> v(6);
  std::vector<int64_t> i(6);
  run(OpKind::TopK, {ref(in, {3, 2}, DType::I32)}, {ref(v, {3, 2}, DType::I32), ref(i, {3, 2}, DType::I64)},
      {{"k", 3}, {"axis", 0}});
  EXPECT_EQ(v, (std::vector<int32_t>{9, 7, 4, 7, 4, 1}));
  EXPECT_EQ(i, (std::vector<int64_t>{1, 0, 0, 1, 2, 2}));

  float nan = std::nanf("");
  std::vector<float> f = {1, nan, 3}, fv(2);
  std::vector<int64_t> fi(2);
  run(OpKind::TopK, {ref(f, {3}, DType::F32)}, {ref(fv, {2}, DType::F32), ref(fi, {2}, DType::I64)},
      {{"k", 2}, {"axis", 0}, {"largest", true}});
  EXPECT_TRUE(std::isnan(fv[0]));
  EXPECT_EQ(fi, (std::vector<int64_t>{1, 2}));
  run(OpKind::TopK, {ref(f, {3}, DType::F32)}, {ref(fv, {2}, DType::F32), ref(fi, {2}, DType::I64)},
      {{"k", 2}, {"axis", 0}, {"largest", false}});
  EXPECT_EQ(fi, (std::vector<int64_t>{0, 2}));
}

TEST(IndexingKernels, ArgSortStableWithDuplicates) {
  std::vector<double> in = {2, 1, 2, 0, 1, 2};
  std::vector<int64_t> out(6);
  run(OpKind::ArgSort, {ref(in, {6}, DType::F64)}, {ref(out, {6}, DType::I64)}, {{"axis", 0}});
  EXPECT_EQ(out, (std::vector<int64_t>{3, 1, 4, 0, 2, 5}));
  run(OpKind::ArgSort, {ref(in, {6}, DType::F64)}, {ref(out, {6}, DType::I64)},
      {{"axis", 0}, {"descending", true}});
  EXPECT_EQ(out, (std::vector<int64_t>{0, 2, 5, 1, 4, 3}));

  // Along axis 0 of a [3,2] u8 tensor.
  std::vector<uint8_t> u = {5, 0, 5, 9, 1, 0};
  std::vector<int64_t> o2(6);
  run(OpKind::ArgSort, {ref(u, {3, 2}, DType::U8)}, {ref(o2, {3, 2}, DType::I64)}, {{"axis", 0}});
  EXPECT_EQ(o2, (std::vector<int64_t>{2, 0, 0, 2, 1, 1}));
}

namespace {

/// Runs `op` as rank `rank` of a dp=2 x tp=2 mesh (the kernels read their block from it).
void runOnRank(OpKind op, std::vector<TensorRef> ins, std::vector<TensorRef> outs, const nlohmann::json &attrs,
               int rank) {
  RankOnMesh where{rank, {2, 2}, {"dp", "tp"}};
  run(op, std::move(ins), std::move(outs), attrs, 2, &where);
}

} // namespace

// Vocab parallelism: each tp rank holds rows [2t, 2t+2) of a [4, 3] table and looks up the
// global ids; rows outside its block come out zero, so the ranks' results add up to the lookup
// of the whole table (and the dp coordinate does not matter).
TEST(IndexingKernels, GatherFromABlockOfRowsGivesAPartialSum) {
  std::vector<float> table(12);
  std::iota(table.begin(), table.end(), 1.f);
  std::vector<int64_t> ids = {3, 0, -1, 2, 1}; // -1 is row 3
  std::vector<float> whole(15), sum(15, 0.f);
  run(OpKind::Gather, {ref(table, {4, 3}), ref(ids, {5}, DType::I64)}, {ref(whole, {5, 3})}, {{"axis", 0}});
  for (int t = 0; t < 2; ++t) {
    std::vector<float> block(table.begin() + 6 * t, table.begin() + 6 * t + 6), out(15, -7.f);
    runOnRank(OpKind::Gather, {ref(block, {2, 3}), ref(ids, {5}, DType::I64)}, {ref(out, {5, 3})},
              {{"axis", 0}, {"block_axes", {"tp"}}}, /*rank=*/2 + t); // dp coordinate 1
    for (int i = 0; i < 15; ++i)
      sum[i] += out[i];
  }
  EXPECT_EQ(sum, whole);
}

TEST(IndexingKernels, GatherElementsFromABlockOfColumnsGivesAPartialSum) {
  std::vector<float> logits = {1, 2, 3, 4, 5, 6, 7, 8}; // [2, 4], split into [2, 2] column blocks
  std::vector<int64_t> target = {3, 0};                 // [2, 1]
  std::vector<float> sum(2, 0.f);
  for (int t = 0; t < 2; ++t) {
    std::vector<float> block = {logits[2 * t], logits[2 * t + 1], logits[4 + 2 * t], logits[5 + 2 * t]}, out(2);
    runOnRank(OpKind::GatherElements, {ref(block, {2, 2}), ref(target, {2, 1}, DType::I64)}, {ref(out, {2, 1})},
              {{"axis", 1}, {"block_axes", {"tp"}}}, t);
    sum[0] += out[0];
    sum[1] += out[1];
  }
  EXPECT_EQ(sum, (std::vector<float>{4, 5}));
}

// The gradients: each tp rank adds only the ids inside its block, and the blocks side by side
// are the whole table's gradient.
TEST(IndexingKernels, GatherGradsIntoABlockAddOnlyItsIndices) {
  std::vector<float> g = {1, 10, 100, 1000}; // [4, 1] rows for ids 3, 0, 3, 1
  std::vector<int64_t> ids = {3, 0, 3, 1};
  std::vector<float> whole(4);
  run(OpKind::GatherGrad, {ref(g, {4, 1}), ref(ids, {4}, DType::I64)}, {ref(whole, {4, 1})},
      {{"axis", 0}, {"dim_size", 4}});
  std::vector<float> joined;
  for (int t = 0; t < 2; ++t) {
    std::vector<float> block(2, -7.f);
    runOnRank(OpKind::GatherGrad, {ref(g, {4, 1}), ref(ids, {4}, DType::I64)}, {ref(block, {2, 1})},
              {{"axis", 0}, {"dim_size", 2}, {"block_axes", {"tp"}}}, t);
    joined.insert(joined.end(), block.begin(), block.end());
  }
  EXPECT_EQ(joined, whole);
  EXPECT_EQ(whole, (std::vector<float>{10, 1000, 0, 101}));

  std::vector<float> ge = {5, 6};         // [2, 1]
  std::vector<int64_t> target = {3, 0};   // [2, 1]
  std::vector<float> left(4), right(4);   // [2, 2] blocks of a [2, 4] gradient
  runOnRank(OpKind::GatherElementsGrad, {ref(ge, {2, 1}), ref(target, {2, 1}, DType::I64)}, {ref(left, {2, 2})},
            {{"axis", 1}, {"block_axes", {"tp"}}}, 0);
  runOnRank(OpKind::GatherElementsGrad, {ref(ge, {2, 1}), ref(target, {2, 1}, DType::I64)}, {ref(right, {2, 2})},
            {{"axis", 1}, {"block_axes", {"tp"}}}, 1);
  EXPECT_EQ(left, (std::vector<float>{0, 0, 6, 0}));
  EXPECT_EQ(right, (std::vector<float>{0, 5, 0, 0}));
}
