// Tests of how the sharding search finds repeated blocks: by structure, not names.
#include "passes/RepeatedBlocks.h"

#include <gtest/gtest.h>

namespace {

/// A chain embed -> (a -> b) x blocks -> head: node 0 the embedding, then a/b pairs, then the head.
struct Chain {
  std::vector<uint64_t> labels;
  std::vector<cpc::NodeLink> links;
  explicit Chain(int blocks) {
    labels.push_back(100);
    for (int i = 0; i < blocks; ++i) {
      labels.push_back(1);
      labels.push_back(2);
    }
    labels.push_back(200);
    for (int i = 0; i + 1 < (int)labels.size(); ++i)
      links.push_back({i, 0, i + 1, 0});
  }
};

TEST(RepeatedBlocks, InnerBlocksShareAClass) {
  Chain chain(8);
  std::vector<int> classes = cpc::repeatedClasses(chain.labels, chain.links, 2);
  // Block i's nodes are 1 + 2i and 2 + 2i; blocks 2..5 are 2 hops or more from either end.
  for (int i = 3; i <= 5; ++i) {
    EXPECT_EQ(classes[1 + 2 * i], classes[1 + 2 * 2]) << "block " << i;
    EXPECT_EQ(classes[2 + 2 * i], classes[2 + 2 * 2]) << "block " << i;
  }
  EXPECT_NE(classes[1 + 2 * 2], classes[2 + 2 * 2]); // a and b differ
}

TEST(RepeatedBlocks, EndsKeepTheirOwnClass) {
  Chain chain(8);
  std::vector<int> classes = cpc::repeatedClasses(chain.labels, chain.links, 2);
  EXPECT_NE(classes[1], classes[1 + 2 * 3]); // the first block borders the embedding
  EXPECT_NE(classes[16], classes[2 + 2 * 3]); // the last one the head
  EXPECT_EQ(classes[0], 0);
}

TEST(RepeatedBlocks, NoRoundsTiesEqualLabels) {
  Chain chain(3);
  std::vector<int> classes = cpc::repeatedClasses(chain.labels, chain.links, 0);
  EXPECT_EQ(classes[1], 1);
  EXPECT_EQ(classes[3], 1);
  EXPECT_EQ(classes[5], 1);
}

} // namespace
