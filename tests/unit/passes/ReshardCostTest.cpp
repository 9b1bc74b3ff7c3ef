// Tests of the resharding prices the sharding search compares: each step is the collective
// cpc-partition inserts, its bytes the counting communicator's ring formulas.
#include "passes/ReshardCost.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

namespace {

using cpc::Layout;

class ReshardCostTest : public ::testing::Test {
protected:
  ReshardCostTest() {
    context_.loadDialect<cpc::CpcDialect>();
    module_ = mlir::ModuleOp::create(mlir::UnknownLoc::get(&context_));
    auto mesh = cpc::getOrCreateMesh(*module_, {{"dp", 2}, {"tp", 4}});
    EXPECT_TRUE(mlir::succeeded(mesh));
    mesh_.emplace(*mesh);
  }

  static Layout layout(std::initializer_list<cpc::MeshAxes> dims, cpc::MeshAxes partial = {}) {
    Layout l;
    l.dims.assign(dims.begin(), dims.end());
    l.partial = partial;
    return l;
  }

  cpc::CommCost cost(const Layout &have, const Layout &want) {
    return cpc::reshardCost(have, want, {8, 16}, 4, *mesh_); // 512 bytes whole
  }

  mlir::MLIRContext context_;
  mlir::OwningOpRef<mlir::ModuleOp> module_;
  std::optional<cpc::Mesh> mesh_;
};

TEST_F(ReshardCostTest, AlikeIsFree) {
  cpc::CommCost c = cost(layout({{"tp"}, {}}), layout({{"tp"}, {}}));
  EXPECT_EQ(c.collectives, 0);
  EXPECT_EQ(c.bytes, 0);
}

TEST_F(ReshardCostTest, SlicingIsFree) {
  EXPECT_EQ(cost(layout({{}, {}}), layout({{}, {"tp"}})).collectives, 0);
}

TEST_F(ReshardCostTest, GatherSendsEveryOtherBlock) {
  // 4 blocks of 128 bytes: each rank sends its block to the 3 others (ring: 3 steps of 128).
  cpc::CommCost c = cost(layout({{"tp"}, {}}), layout({{}, {}}));
  EXPECT_EQ(c.collectives, 1);
  EXPECT_EQ(c.bytes, 3 * 128);
}

TEST_F(ReshardCostTest, PartialSumIsAllReduced) {
  // A ring all-reduce sends 2 (n - 1) / n of the buffer.
  cpc::CommCost c = cost(layout({{}, {}}, {"tp"}), layout({{}, {}}));
  EXPECT_EQ(c.collectives, 1);
  EXPECT_EQ(c.bytes, 2.0 * 3 / 4 * 512);
}

TEST_F(ReshardCostTest, PartialSumWantedSplitIsReduceScattered) {
  cpc::CommCost c = cost(layout({{}, {}}, {"tp"}), layout({{"tp"}, {}}));
  EXPECT_EQ(c.collectives, 1);
  EXPECT_EQ(c.bytes, 3.0 / 4 * 512);
}

TEST_F(ReshardCostTest, MovedSplitIsOneAllToAll) {
  cpc::CommCost c = cost(layout({{"tp"}, {}}), layout({{}, {"tp"}}));
  EXPECT_EQ(c.collectives, 1);
  EXPECT_EQ(c.bytes, 3.0 / 4 * 128);
}

TEST_F(ReshardCostTest, MinorAxisGatheredAlone) {
  // [dp*tp] (8 blocks of 64 bytes) wanted [dp]: gather over tp only, 3 blocks of 64.
  cpc::CommCost c = cost(layout({{"dp", "tp"}, {}}), layout({{"dp"}, {}}));
  EXPECT_EQ(c.collectives, 1);
  EXPECT_EQ(c.bytes, 3 * 64);
}

TEST_F(ReshardCostTest, WholeValueIsNoPartialSum) {
  EXPECT_TRUE(cost(layout({{}, {}}), layout({{}, {}}, {"tp"})).infeasible);
  EXPECT_FALSE(cost(layout({{}, {}}, {"tp"}), layout({{}, {}}, {"tp"})).infeasible);
}

TEST_F(ReshardCostTest, SecondsAreLatencyPlusBytesOverBandwidth) {
  cpc::CommCost c = cost(layout({{"tp"}, {}}), layout({{}, {}}));
  cpc::LinkCost link{1e-5, 1e9};
  EXPECT_DOUBLE_EQ(c.seconds(link), 1e-5 + 384 / 1e9);
}

} // namespace
