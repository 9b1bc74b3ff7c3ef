//===- OpAttrsTest.cpp - decoding a step's attributes once, by the op's rules ===//
#include "kernels/OpAttrs.h"
#include "kernels/Tensor.h"

#include <gtest/gtest.h>

namespace cpc::kernels {
namespace {

std::string decodeError(OpKind op, const nlohmann::json &j) {
  try {
    decodeOpAttrs(op, j);
  } catch (const RuntimeError &e) {
    return e.what();
  }
  return "no error";
}

// Tests that every field lands where its name says, typed as ODS declares it.
TEST(OpAttrs, DecodesTypedFields) {
  OpAttrs sum = decodeOpAttrs(OpKind::ReduceSum, {{"axes", {0, 2}}, {"keepdims", true}});
  EXPECT_EQ(sum.axes, (std::vector<int64_t>{0, 2}));
  EXPECT_TRUE(sum.keepdims);
  OpAttrs norm = decodeOpAttrs(OpKind::LayerNorm, {{"axis", -1}, {"epsilon", 1e-6}});
  EXPECT_EQ(norm.axis, -1);
  EXPECT_DOUBLE_EQ(norm.epsilon, 1e-6);
  OpAttrs fused = decodeOpAttrs(OpKind::MatMulBias, {{"transpose_rhs", true}, {"activation", "gelu"}, {"approximate", "tanh"}});
  EXPECT_FALSE(fused.transposeLhs);
  EXPECT_TRUE(fused.transposeRhs);
  EXPECT_EQ(fused.activation, FusedActivation::Gelu);
  EXPECT_EQ(fused.approximate, GeluApproximation::Tanh);
  EXPECT_EQ(decodeOpAttrs(OpKind::ScatterND, {{"reduction", "add"}}).reduction, ScatterReduction::Add);
  EXPECT_EQ(decodeOpAttrs(OpKind::AllReduce, {{"mesh", "mesh"}, {"mesh_axes", {"dp", "tp"}}, {"kind", "max"}}).kind,
            ReductionKind::Max);
  OpAttrs pad = decodeOpAttrs(OpKind::Pad, {{"low_padding", {1, 0}}, {"high_padding", {0, 2}}, {"interior_padding", {0, 0}},
                                            {"value", 0.5}});
  EXPECT_EQ(pad.lowPadding, (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(pad.highPadding, (std::vector<int64_t>{0, 2}));
  EXPECT_TRUE(pad.has(AttrId::value));
  EXPECT_DOUBLE_EQ(pad.value, 0.5);
  OpAttrs send = decodeOpAttrs(OpKind::Send, {{"mesh", "mesh"}, {"mesh_axis", "pp"}, {"peer", 1}, {"channel", 3}});
  EXPECT_EQ(send.meshAxis, "pp");
  EXPECT_EQ(send.peer, 1);
  EXPECT_EQ(send.channel, 3);
  OpAttrs random = decodeOpAttrs(OpKind::RandomUniform, {{"low", -2}, {"high", 3.0}, {"seed", 7}});
  EXPECT_DOUBLE_EQ(random.low, -2.0); // an integer is a number
  EXPECT_DOUBLE_EQ(random.high, 3.0);
  EXPECT_EQ(attrEnumName(GeluApproximation::Tanh), std::string("tanh"));
  EXPECT_EQ(attrEnumName(AttentionLayout::TokenMajor), std::string("bnhd"));
}

// Tests that an attribute left out gets the op's ODS default, an optional one stays absent, and
// discardable annotations are skipped.
TEST(OpAttrs, DefaultsAndAnnotations) {
  OpAttrs conv = decodeOpAttrs(OpKind::Conv2D, {{"strides", {1, 1}}, {"padding", {0, 0, 0, 0}}, {"dilations", {1, 1}},
                                                {"cpc.shardings", {"anything"}}, {"cpc.stage", 1}});
  EXPECT_EQ(conv.groups, 1);
  EXPECT_TRUE(conv.has(AttrId::groups));
  OpAttrs topk = decodeOpAttrs(OpKind::TopK, {{"k", 2}, {"axis", 0}});
  EXPECT_TRUE(topk.largest);
  EXPECT_TRUE(topk.sorted);
  EXPECT_EQ(decodeOpAttrs(OpKind::AllReduce, {{"mesh", "mesh"}, {"mesh_axes", {"dp"}}}).kind, ReductionKind::Sum);
  EXPECT_DOUBLE_EQ(decodeOpAttrs(OpKind::Pad, {{"low_padding", {1}}, {"high_padding", {0}}, {"interior_padding", {0}}}).value, 0.0);
  OpAttrs gather = decodeOpAttrs(OpKind::Gather, {{"axis", 0}});
  EXPECT_FALSE(gather.has(AttrId::blockAxes));
  EXPECT_TRUE(decodeOpAttrs(OpKind::Gather, {{"axis", 0}, {"block_axes", {"tp"}}}).has(AttrId::blockAxes));
  EXPECT_EQ(decodeOpAttrs(OpKind::Add, nullptr).present.count(), 0u);
}

// Tests that a name the op does not declare (even one another op has), a required attribute
// missing, a wrong type and an unknown enum case fail naming the attribute.
TEST(OpAttrs, RejectsWhatTheOpDoesNotDeclare) {
  EXPECT_NE(decodeError(OpKind::Add, {{"frobnicate", 1}}).find("unknown attribute 'frobnicate'"), std::string::npos);
  EXPECT_NE(decodeError(OpKind::Softmax, {{"axis", 0}, {"k", 1}}).find("unknown attribute 'k'"), std::string::npos);
  EXPECT_NE(decodeError(OpKind::LayerNorm, {{"axis", 0}}).find("missing attribute 'epsilon'"), std::string::npos);
  EXPECT_NE(decodeError(OpKind::Softmax, {{"axis", 1.5}}).find("'axis' should be an integer"), std::string::npos);
  EXPECT_NE(decodeError(OpKind::Gelu, {{"approximate", "fast"}}).find("'approximate' is 'fast' (expected none, tanh)"),
            std::string::npos);
  EXPECT_NE(decodeError(OpKind::ReduceSum, {{"axes", {0}}, {"keepdims", 1}}).find("'keepdims' should be true or false"),
            std::string::npos);
  EXPECT_NE(decodeError(OpKind::ReduceSum, {{"axes", {"dp"}}}).find("'axes' should be an integer"), std::string::npos);
  EXPECT_NE(decodeError(OpKind::Add, nlohmann::json::array()).find("should be an object"), std::string::npos);
}

} // namespace
} // namespace cpc::kernels
