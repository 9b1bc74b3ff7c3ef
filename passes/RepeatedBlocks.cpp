//===- RepeatedBlocks.cpp - nodes that repeat alike, found by structure ---===//
#include "passes/RepeatedBlocks.h"

#include "llvm/ADT/Hashing.h"

#include <algorithm>
#include <unordered_map>

namespace cpc {

std::vector<int> repeatedClasses(const std::vector<uint64_t> &labels, const std::vector<NodeLink> &links,
                                 int rounds) {
  size_t n = labels.size();
  std::vector<std::vector<const NodeLink *>> touching(n);
  for (const NodeLink &link : links) {
    touching[link.from].push_back(&link);
    if (link.to != link.from)
      touching[link.to].push_back(&link);
  }
  std::vector<uint64_t> current = labels, next(n);
  for (int round = 0; round < rounds; ++round) {
    for (size_t i = 0; i < n; ++i) {
      std::vector<uint64_t> around; // a multiset: sorted, so the order of uses does not matter
      for (const NodeLink *link : touching[i]) {
        bool out = link->from == (int)i;
        around.push_back(llvm::hash_combine(out, out ? link->fromSlot : link->toSlot,
                                            out ? link->toSlot : link->fromSlot, current[out ? link->to : link->from]));
      }
      std::sort(around.begin(), around.end());
      next[i] = llvm::hash_combine(current[i], llvm::hash_combine_range(around.begin(), around.end()));
    }
    current.swap(next);
  }
  std::vector<int> classes(n);
  std::unordered_map<uint64_t, int> first;
  for (size_t i = 0; i < n; ++i)
    classes[i] = first.try_emplace(current[i], (int)i).first->second;
  return classes;
}

} // namespace cpc
