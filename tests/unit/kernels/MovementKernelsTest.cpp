//===- MovementKernelsTest.cpp - transpose, slice, concat, broadcast ------===//
#include "kernels/cpu/Kernel.h"
#include "tests/unit/kernels/KernelTestUtil.h"

#include <gtest/gtest.h>

#include <numeric>

using namespace cpc;
using namespace cpc::kernels;
using namespace cpc::kernels::testing;

namespace {

template <typename T> std::vector<T> iotaVec(size_t n) {
  std::vector<T> v(n);
  std::iota(v.begin(), v.end(), T(0));
  return v;
}

std::vector<int64_t> stridesOf(const std::vector<int64_t> &shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (int64_t i = (int64_t)shape.size() - 2; i >= 0; --i)
    s[i] = s[i + 1] * shape[i + 1];
  return s;
}

// Reference transpose by coordinates.
template <typename T>
std::vector<T> naiveTranspose(const std::vector<T> &in, const std::vector<int64_t> &shape,
                              const std::vector<int64_t> &perm) {
  size_t r = shape.size();
  std::vector<int64_t> outShape(r), inS = stridesOf(shape);
  for (size_t i = 0; i < r; ++i)
    outShape[i] = shape[perm[i]];
  std::vector<T> out(in.size());
  std::vector<int64_t> c(r, 0);
  for (size_t e = 0; e < out.size(); ++e) {
    int64_t off = 0;
    for (size_t i = 0; i < r; ++i)
      off += c[i] * inS[perm[i]];
    out[e] = in[off];
    for (int64_t i = (int64_t)r - 1; i >= 0 && ++c[i] == outShape[i]; --i)
      c[i] = 0;
  }
  return out;
}

} // namespace

TEST(MovementKernels, Transpose2D) {
  // Big enough for several tiles, ragged edges and the threaded path.
  auto in = iotaVec<float>(203 * 517);
  std::vector<float> out(in.size());
  run(OpKind::Transpose, {ref(in, {203, 517}, DType::F32)}, {ref(out, {517, 203}, DType::F32)},
      {{"permutation", {1, 0}}}, 4);
  EXPECT_EQ(out, naiveTranspose(in, {203, 517}, {1, 0}));
}

TEST(MovementKernels, Transpose4DPerms) {
  std::vector<int64_t> shape = {2, 3, 4, 5};
  auto in = iotaVec<int64_t>(120);
  for (std::vector<int64_t> perm : {std::vector<int64_t>{0, 2, 1, 3}, {0, 1, 3, 2}, {3, 2, 1, 0},
                                    {1, 3, 0, 2}, {0, 1, 2, 3}}) {
    std::vector<int64_t> outShape;
    for (int64_t p : perm)
      outShape.push_back(shape[p]);
    std::vector<int64_t> out(120);
    run(OpKind::Transpose, {ref(in, shape, DType::I64)}, {ref(out, outShape, DType::I64)},
        {{"permutation", perm}});
    EXPECT_EQ(out, naiveTranspose(in, shape, perm)) << "perm " << shapeString(perm);
  }
  // 1- and 2-byte elements take the same paths.
  std::vector<uint8_t> b = iotaVec<uint8_t>(120), bo(120);
  run(OpKind::Transpose, {ref(b, shape, DType::U8)}, {ref(bo, {5, 4, 3, 2}, DType::U8)},
      {{"permutation", {3, 2, 1, 0}}});
  EXPECT_EQ(bo, naiveTranspose(b, shape, {3, 2, 1, 0}));
  std::vector<uint16_t> h = iotaVec<uint16_t>(120), ho(120);
  run(OpKind::Transpose, {ref(h, shape, DType::BF16)}, {ref(ho, {2, 3, 5, 4}, DType::BF16)},
      {{"permutation", {0, 1, 3, 2}}});
  EXPECT_EQ(ho, naiveTranspose(h, shape, {0, 1, 3, 2}));
}

TEST(MovementKernels, SliceWithStrides) {
  // [5, 7] -> rows 1,3 ; cols 0,3,6
  auto in = iotaVec<int32_t>(35);
  std::vector<int32_t> out(6);
  run(OpKind::Slice, {ref(in, {5, 7}, DType::I32)}, {ref(out, {2, 3}, DType::I32)},
      {{"starts", {1, 0}}, {"limits", {4, 7}}, {"strides", {2, 3}}});
  EXPECT_EQ(out, (std::vector<int32_t>{7, 10, 13, 21, 24, 27}));

  // Contiguous inner slice of a 3-D tensor.
  auto in3 = iotaVec<double>(2 * 3 * 4);
  std::vector<double> out3(2 * 2 * 2);
  run(OpKind::Slice, {ref(in3, {2, 3, 4}, DType::F64)}, {ref(out3, {2, 2, 2}, DType::F64)},
      {{"starts", {0, 1, 1}}, {"limits", {2, 3, 3}}, {"strides", {1, 1, 1}}});
  EXPECT_EQ(out3, (std::vector<double>{5, 6, 9, 10, 17, 18, 21, 22}));

  // A slice that would read past the input is refused.
  std::vector<int32_t> bad(3);
  EXPECT_THROW(run(OpKind::Slice, {ref(in, {5, 7}, DType::I32)}, {ref(bad, {1, 3}, DType::I32)},
                   {{"starts", {0, 4}}, {"limits", {1, 7}}, {"strides", {1, 2}}}),
               RuntimeError);
}

TEST(MovementKernels, ConcatMiddleAxis) {
  auto a = iotaVec<float>(2 * 1 * 3), b = iotaVec<float>(2 * 2 * 3);
  for (auto &x : b)
    x += 100;
  std::vector<float> out(2 * 3 * 3);
  run(OpKind::Concat, {ref(a, {2, 1, 3}, DType::F32), ref(b, {2, 2, 3}, DType::F32)},
      {ref(out, {2, 3, 3}, DType::F32)}, {{"axis", 1}});
  EXPECT_EQ(out, (std::vector<float>{0, 1, 2, 100, 101, 102, 103, 104, 105,
                                     3, 4, 5, 106, 107, 108, 109, 110, 111}));
  // Axis 0 and negative axis.
  std::vector<float> out0(6 + 12);
  run(OpKind::Concat, {ref(a, {2, 1, 3}, DType::F32), ref(b, {2, 2, 3}, DType::F32)},
      {ref(out0, {2, 3, 3}, DType::F32)}, {{"axis", -2}});
  EXPECT_EQ(out0, out);
  std::vector<float> c(12 + 6);
  run(OpKind::Concat, {ref(b, {4, 3}, DType::F32), ref(a, {2, 3}, DType::F32)}, {ref(c, {6, 3}, DType::F32)},
      {{"axis", 0}});
  EXPECT_EQ(std::vector<float>(c.begin(), c.begin() + 12), b);
  EXPECT_EQ(std::vector<float>(c.begin() + 12, c.end()), a);
}

TEST(MovementKernels, Broadcast) {
  std::vector<int64_t> in = {1, 2, 3};
  std::vector<int64_t> out(2 * 2 * 3);
  run(OpKind::Broadcast, {ref(in, {3}, DType::I64)}, {ref(out, {2, 2, 3}, DType::I64)}, {});
  EXPECT_EQ(out, (std::vector<int64_t>{1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3}));

  std::vector<float> col = {1, 2}, out2(2 * 2 * 3);
  run(OpKind::Broadcast, {ref(col, {2, 1}, DType::F32)}, {ref(out2, {2, 2, 3}, DType::F32)}, {});
  EXPECT_EQ(out2, (std::vector<float>{1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2}));

  std::vector<uint8_t> s = {1}, out3(4);
  run(OpKind::Broadcast, {ref(s, {}, DType::I1)}, {ref(out3, {2, 2}, DType::I1)}, {});
  EXPECT_EQ(out3, (std::vector<uint8_t>{1, 1, 1, 1}));

  std::vector<float> bad(6);
  EXPECT_THROW(run(OpKind::Broadcast, {ref(col, {2, 1}, DType::F32)}, {ref(bad, {3, 2}, DType::F32)}, {}),
               RuntimeError);
}

TEST(MovementKernels, ReshapeCopies) {
  auto in = iotaVec<int16_t>(24);
  std::vector<int16_t> out(24);
  run(OpKind::Reshape, {ref(in, {2, 12}, DType::I16)}, {ref(out, {4, 3, 2}, DType::I16)}, {});
  EXPECT_EQ(out, in);
}

TEST(MovementKernels, LargeThreadedCopies) {
  // Above the threading threshold: concat, slice and broadcast split their rows over threads.
  auto a = iotaVec<float>(64 * 300 * 8), b = iotaVec<float>(64 * 200 * 8);
  std::vector<float> out(64 * 500 * 8);
  run(OpKind::Concat, {ref(a, {64, 300, 8}, DType::F32), ref(b, {64, 200, 8}, DType::F32)},
      {ref(out, {64, 500, 8}, DType::F32)}, {{"axis", 1}}, 4);
  for (int64_t o = 0; o < 64; ++o)
    for (int64_t j = 0; j < 500 * 8; ++j)
      ASSERT_EQ(out[o * 4000 + j], j < 2400 ? a[o * 2400 + j] : b[o * 1600 + j - 2400]);

  std::vector<float> sl(32 * 250 * 8);
  run(OpKind::Slice, {ref(out, {64, 500, 8}, DType::F32)}, {ref(sl, {32, 250, 8}, DType::F32)},
      {{"starts", {1, 0, 0}}, {"limits", {64, 500, 8}}, {"strides", {2, 2, 1}}}, 4);
  for (int64_t i = 0; i < 32; ++i)
    for (int64_t j = 0; j < 250; ++j)
      for (int64_t k = 0; k < 8; ++k)
        ASSERT_EQ(sl[(i * 250 + j) * 8 + k], out[((2 * i + 1) * 500 + 2 * j) * 8 + k]);

  std::vector<float> row = iotaVec<float>(1000), bc(300 * 1000);
  run(OpKind::Broadcast, {ref(row, {1, 1000}, DType::F32)}, {ref(bc, {300, 1000}, DType::F32)}, {}, 4);
  for (int64_t i = 0; i < 300; ++i)
    ASSERT_EQ(std::vector<float>(bc.begin() + i * 1000, bc.begin() + (i + 1) * 1000), row);
}
