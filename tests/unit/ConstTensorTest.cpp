// Tests of the host tensors that fold shape subgraphs during ONNX import.
#include "frontends/onnx/ConstTensor.h"

#include <gtest/gtest.h>

using cpc::onnx_import::ConstTensor;
using Ints = std::vector<int64_t>;

namespace {
ConstTensor iota(Ints shape) {
  Ints v(cpc::onnx_import::numElementsOf(shape));
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = i;
  return ConstTensor::fromInts(v, shape);
}
} // namespace

TEST(ConstTensor, BroadcastBinaryFollowsNumpy) {
  auto a = iota({2, 1, 3});
  auto b = ConstTensor::fromInts({10, 20}, {2, 1});
  auto c = ConstTensor::broadcastBinary(a, b, a.type(), [](double x, double y) { return x + y; });
  EXPECT_EQ(c.shape(), (Ints{2, 2, 3}));
  EXPECT_EQ(c.toInts(), (Ints{10, 11, 12, 20, 21, 22, 13, 14, 15, 23, 24, 25}));
}

TEST(ConstTensor, BroadcastBinaryRejectsMismatch) {
  EXPECT_THROW(ConstTensor::broadcastBinary(iota({2, 3}), iota({4}), onnx::TensorProto_DataType_INT64,
                                            [](double x, double y) { return x + y; }),
               std::runtime_error);
}

TEST(ConstTensor, GatherTakesSlicesAndNegativeIndices) {
  auto shape = ConstTensor::fromInts({2, 3, 32, 32}, {4});
  auto idx = ConstTensor::fromInts({-1, 0}, {2});
  EXPECT_EQ(shape.gather(idx, 0).toInts(), (Ints{32, 2}));
  auto m = iota({2, 3});
  EXPECT_EQ(m.gather(ConstTensor::fromInts({2}, {}), 1).toInts(), (Ints{2, 5}));
  EXPECT_EQ(m.gather(ConstTensor::fromInts({2}, {}), 1).shape(), (Ints{2}));
  EXPECT_THROW(m.gather(ConstTensor::fromInts({3}, {}), 1), std::runtime_error);
}

TEST(ConstTensor, SliceTransposeConcat) {
  auto m = iota({3, 4});
  EXPECT_EQ(m.slice({1, 0}, {3, 4}, {1, 2}).toInts(), (Ints{4, 6, 8, 10}));
  EXPECT_EQ(m.transpose({1, 0}).toInts(), (Ints{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}));
  auto a = iota({2, 1}), b = iota({2, 2});
  auto c = ConstTensor::concat({&a, &b}, 1);
  EXPECT_EQ(c.shape(), (Ints{2, 3}));
  EXPECT_EQ(c.toInts(), (Ints{0, 0, 1, 1, 2, 3}));
}

TEST(ConstTensor, ReduceProdAndSumKeepOrDropDims) {
  auto m = iota({2, 3}); // 0 1 2 / 3 4 5
  EXPECT_EQ(m.reduce({1}, false, false).toInts(), (Ints{3, 12}));
  auto p = ConstTensor::fromInts({2, 16, 48}, {3}).reduce({0}, true, true);
  EXPECT_EQ(p.shape(), (Ints{1}));
  EXPECT_EQ(p.toInts(), (Ints{1536}));
}

TEST(ConstTensor, CastTruncatesAndRoundsToFloat32) {
  auto f = ConstTensor::fromDoubles({1.9, -1.9, 0.1}, {3});
  EXPECT_EQ(f.cast(onnx::TensorProto_DataType_INT64).toInts(), (Ints{1, -1, 0}));
  EXPECT_EQ(f.getDouble(2), (double)0.1f); // stored with float32 precision
  auto b = ConstTensor::fromInts({0, 5}, {2}).cast(onnx::TensorProto_DataType_BOOL);
  EXPECT_EQ(b.toInts(), (Ints{0, 1}));
}

TEST(ConstTensor, LargeInt64SurvivesExactly) {
  auto big = ConstTensor::fromInts({INT64_MAX, 7}, {2});
  EXPECT_EQ(big.toInts()[0], INT64_MAX);
}

TEST(ConstTensor, FromProtoReadsRawAndTypedData) {
  onnx::TensorProto p;
  p.set_data_type(onnx::TensorProto_DataType_INT64);
  p.add_dims(2);
  p.add_int64_data(4);
  p.add_int64_data(-1);
  EXPECT_EQ(ConstTensor::fromProto(p).toInts(), (Ints{4, -1}));

  onnx::TensorProto r;
  r.set_data_type(onnx::TensorProto_DataType_FLOAT);
  r.add_dims(2);
  float vals[2] = {0.5f, -2.0f};
  r.set_raw_data(std::string(reinterpret_cast<char *>(vals), sizeof(vals)));
  auto t = ConstTensor::fromProto(r);
  EXPECT_EQ(t.getDouble(0), 0.5);
  EXPECT_EQ(t.getDouble(1), -2.0);

  r.set_raw_data("abc"); // wrong byte count
  EXPECT_THROW(ConstTensor::fromProto(r), std::runtime_error);
}
