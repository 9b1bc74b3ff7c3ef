//===- RepeatedBlocks.h - nodes that repeat alike, found by structure -----===//
//
// A transformer's blocks repeat: the ops of block 3 look and connect like those of block 7.
// The sharding search ties such nodes to one choice (PyTorch AutoParallel's lever: LLaMA-3 8B
// 118 s -> 5.5 s for a 1.4% worse objective), which it finds without names by Weisfeiler-Lehman
// hashing: a node's label is refined, round after round, by its neighbours' labels and the
// slots that connect them, so after R rounds two nodes share a label only when their
// neighbourhoods R hops deep are alike. Nodes near where the repetition starts or ends (within
// R hops of the embedding or the head) keep labels of their own.
//
#ifndef CPC_PASSES_REPEATEDBLOCKS_H
#define CPC_PASSES_REPEATEDBLOCKS_H

#include <cstddef>
#include <cstdint>
#include <vector>

namespace cpc {

/// A directed connection: output `fromSlot` of node `from` feeds input `toSlot` of node `to`.
struct NodeLink {
  int from;
  unsigned fromSlot;
  int to;
  unsigned toSlot;
};

/// The class of each node: nodes with equal `labels` whose neighbourhoods `rounds` hops deep
/// are alike share a class, numbered by its first node (class[i] <= i).
std::vector<int> repeatedClasses(const std::vector<uint64_t> &labels, const std::vector<NodeLink> &links,
                                 int rounds);

} // namespace cpc

#endif
