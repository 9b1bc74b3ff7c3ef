//===- Traffic.cpp --------------------------------------------------------===//
#include "runtime/Traffic.h"

namespace cpc::traffic {

int64_t allReduce(int64_t bufferBytes, int n) { return n > 0 ? 2 * (n - 1) * bufferBytes / n : 0; }

int64_t blockExchange(int64_t blockBytes, int n) { return n > 0 ? (n - 1) * blockBytes : 0; }

int64_t broadcastFrom(int64_t bufferBytes, int n, int position, int root) {
  int chain = (position - root + n) % n; // distance from the root along the chain
  return chain + 1 < n ? bufferBytes : 0;
}

int64_t reduceTo(int64_t bufferBytes, int n, int position, int root) {
  int chain = (position - root - 1 + 2 * n) % n; // the chain starts after the root and ends at it
  return chain + 1 < n ? bufferBytes : 0;
}

int64_t broadcast(int64_t bytes, int n, int rank, int root) { return n > 1 && rank == root ? bytes : 0; }

int64_t ofStep(OpKind op, int64_t inputBytes, int64_t outputBytes, int n, int position, int root) {
  switch (op) {
  case OpKind::AllReduce: return allReduce(inputBytes, n);
  case OpKind::AllGather: return blockExchange(inputBytes, n);        // this rank's block
  case OpKind::ReduceScatter: return blockExchange(outputBytes, n);   // the block it keeps
  case OpKind::AllToAll: return n > 0 ? blockExchange(inputBytes / n, n) : 0;
  case OpKind::BroadcastFrom: return broadcastFrom(inputBytes, n, position, root);
  case OpKind::ReduceTo: return reduceTo(inputBytes, n, position, root);
  case OpKind::Send: return inputBytes;
  default: return 0;
  }
}

} // namespace cpc::traffic
