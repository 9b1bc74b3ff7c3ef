//===- Traffic.h - the bytes a collective sends from a rank ---------------===//
//
// What each collective sends from this rank, as a ring (or chain) implementation would: the one
// formula set the counting communicator counts with and the cost model prices (n members;
// `position` is this rank's in the group, `root` the root's).
//
#ifndef CPC_RUNTIME_TRAFFIC_H
#define CPC_RUNTIME_TRAFFIC_H

#include "kernels/OpKind.h"

#include <cstdint>

namespace cpc::traffic {
/// all_reduce: 2(n-1)/n of the buffer.
int64_t allReduce(int64_t bufferBytes, int n);
/// all_gather, reduce_scatter and all_to_all: (n-1) blocks.
int64_t blockExchange(int64_t blockBytes, int n);
/// broadcast_from: every member of the chain from the root passes the buffer on but the last.
int64_t broadcastFrom(int64_t bufferBytes, int n, int position, int root);
/// reduce_to: every member but the root (the end of the chain) passes its running sum on.
int64_t reduceTo(int64_t bufferBytes, int n, int position, int root);
/// broadcast over a world of n: the root sends the buffer (to someone when n > 1).
int64_t broadcast(int64_t bytes, int n, int rank, int root);
/// What a plan's collective step of `op` sends from this rank, from the bytes of its inputs and
/// outputs (as the executor's collective kernels call the communicator); a send its input.
int64_t ofStep(OpKind op, int64_t inputBytes, int64_t outputBytes, int n, int position, int root);
} // namespace cpc::traffic

#endif
