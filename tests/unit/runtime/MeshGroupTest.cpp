// A rank's group along some mesh axes is every rank that differs from it only there, in
// ascending order: checked against the definition on meshes of 1 to 4 dims.
#include "runtime/Plan.h"

#include <gtest/gtest.h>

namespace {

std::vector<int> byDefinition(int rank, const std::vector<int64_t> &shape, const std::vector<bool> &along) {
  std::vector<int64_t> mine = cpc::meshCoordinates(rank, shape);
  std::vector<int> group;
  for (int64_t r = 0; r < cpc::numElements(shape); ++r) {
    std::vector<int64_t> c = cpc::meshCoordinates(r, shape);
    bool same = true;
    for (size_t d = 0; d < shape.size(); ++d)
      same &= along[d] || c[d] == mine[d];
    if (same)
      group.push_back((int)r);
  }
  return group;
}

TEST(MeshGroupTest, EqualsTheDefinition) {
  for (const std::vector<int64_t> &shape : std::vector<std::vector<int64_t>>{{}, {4}, {2, 3}, {2, 1, 4}, {3, 2, 2, 2}})
    for (unsigned mask = 0; mask < (1u << shape.size()); ++mask) {
      std::vector<bool> along(shape.size());
      for (size_t d = 0; d < shape.size(); ++d)
        along[d] = mask >> d & 1;
      for (int rank = 0; rank < cpc::numElements(shape); ++rank)
        EXPECT_EQ(cpc::meshGroup(rank, shape, along), byDefinition(rank, shape, along))
            << "rank " << rank << " of " << shape.size() << "-d mesh, axes mask " << mask;
    }
}

} // namespace
