//===- OpAttrsTest.cpp - decoding a step's attributes once -----------------===//
#include "kernels/OpAttrs.h"
#include "kernels/Tensor.h"

#include <gtest/gtest.h>

namespace cpc::kernels {
namespace {

// Tests that every field lands where its name and JSON type say.
TEST(OpAttrs, DecodesTypedFields) {
  OpAttrs a = decodeOpAttrs({{"axis", -1},
                             {"axes", {0, 2}},
                             {"keepdims", true},
                             {"epsilon", 1e-6},
                             {"transpose_rhs", true},
                             {"approximate", "tanh"},
                             {"reduction", "add"},
                             {"kind", "max"},
                             {"low", {1, 0}},
                             {"high", {0, 2}},
                             {"interior", {0, 0}},
                             {"value", 0.5}});
  EXPECT_EQ(a.axis, -1);
  EXPECT_EQ(a.axes, (std::vector<int64_t>{0, 2}));
  EXPECT_TRUE(a.keepdims);
  EXPECT_DOUBLE_EQ(a.epsilon, 1e-6);
  EXPECT_FALSE(a.transposeLhs);
  EXPECT_TRUE(a.transposeRhs);
  EXPECT_EQ(a.approximate, GeluApproximation::Tanh);
  EXPECT_EQ(a.reduction, ScatterReduction::Add);
  EXPECT_EQ(a.kind, CollectiveReduction::Max);
  EXPECT_EQ(a.lowPadding, (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(a.highPadding, (std::vector<int64_t>{0, 2}));
  EXPECT_TRUE(a.hasValue);
  EXPECT_DOUBLE_EQ(a.value, 0.5);
}

// Tests that names two ops use with different types go to the field of their type.
TEST(OpAttrs, SameNameDifferentTypes) {
  OpAttrs send = decodeOpAttrs({{"axis", "pp"}, {"peer", 1}, {"channel", 3}});
  EXPECT_EQ(send.axisName, "pp");
  EXPECT_EQ(send.peer, 1);
  OpAttrs collective = decodeOpAttrs({{"axes", {"dp", "tp"}}, {"mesh", "mesh"}});
  EXPECT_EQ(collective.meshAxes, (std::vector<std::string>{"dp", "tp"}));
  EXPECT_TRUE(collective.axes.empty());
  OpAttrs random = decodeOpAttrs({{"low", -2.0}, {"high", 3.0}, {"seed", 7}});
  EXPECT_DOUBLE_EQ(random.low, -2.0);
  EXPECT_DOUBLE_EQ(random.high, 3.0);
}

// Tests that the defaults are the ODS ones and discardable annotations are skipped.
TEST(OpAttrs, DefaultsAndAnnotations) {
  OpAttrs a = decodeOpAttrs({{"cpc.shardings", {"anything"}}, {"cpc.stage", 1}});
  EXPECT_EQ(a.groups, 1);
  EXPECT_TRUE(a.largest);
  EXPECT_FALSE(a.hasDimSize);
  EXPECT_EQ(a.kind, CollectiveReduction::Sum);
}

// Tests that unknown names, wrong types and unknown enum values fail naming the attribute.
TEST(OpAttrs, RejectsWhatNoKernelReads) {
  auto message = [](const nlohmann::json &j) {
    try {
      decodeOpAttrs(j);
    } catch (const RuntimeError &e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({{"frobnicate", 1}}).find("unknown attribute 'frobnicate'"), std::string::npos);
  EXPECT_NE(message({{"axis", 1.5}}).find("'axis' should be an integer"), std::string::npos);
  EXPECT_NE(message({{"approximate", "fast"}}).find("'approximate' is 'fast'"), std::string::npos);
  EXPECT_NE(message({{"keepdims", 1}}).find("'keepdims' should be true or false"), std::string::npos);
  EXPECT_NE(message(nlohmann::json::array()).find("should be an object"), std::string::npos);
}

} // namespace
} // namespace cpc::kernels
