// Tests of the shape rules shared by the cpc ops and the importer, and of import flags.
#include "dialects/cpc/ShapeRules.h"
#include "frontends/onnx/OnnxImporter.h"

#include <gtest/gtest.h>

using Shape = llvm::SmallVector<int64_t>;

TEST(ShapeRules, BroadcastShapes) {
  EXPECT_EQ(*cpc::broadcastShapes({2, 1, 3}, {4, 1}), (Shape{2, 4, 3}));
  EXPECT_EQ(*cpc::broadcastShapes({}, {5}), (Shape{5}));
  EXPECT_FALSE(cpc::broadcastShapes({2, 3}, {4}).has_value());
}

TEST(ShapeRules, IsBroadcastableTo) {
  EXPECT_TRUE(cpc::isBroadcastableTo({1, 64}, {2, 5, 64}));
  EXPECT_FALSE(cpc::isBroadcastableTo({2, 64}, {5, 64}));
  EXPECT_FALSE(cpc::isBroadcastableTo({1, 2, 3}, {2, 3}));
}

TEST(ImportFlags, InputShapeParses) {
  cpc::ImportOptions options;
  cpc::parseInputShapeFlag("imgs=2x3x224x224", options);
  EXPECT_EQ(options.inputShapes["imgs"], (std::vector<int64_t>{2, 3, 224, 224}));
  cpc::parseInputShapeFlag("scalarish=7", options);
  EXPECT_EQ(options.inputShapes["scalarish"], (std::vector<int64_t>{7}));
}

TEST(ImportFlags, MalformedInputShapeIsAnError) {
  cpc::ImportOptions options;
  for (const char *bad : {"imgs", "=2x3", "imgs=", "imgs=2xq", "imgs=2x-3", "imgs=2xx3", "imgs=0"})
    EXPECT_THROW(cpc::parseInputShapeFlag(bad, options), cpc::ImportError) << bad;
}
