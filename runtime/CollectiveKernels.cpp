//===- CollectiveKernels.cpp ----------------------------------------------===//
#include "runtime/CollectiveKernels.h"
#include "runtime/Blocks.h"
#include "runtime/Communicator.h"
#include "runtime/Device.h"
#include "runtime/Plan.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <vector>

namespace cpc {

namespace {

int64_t axisIndex(const kernels::KernelContext &ctx, const std::string &name) {
  for (size_t i = 0; i < ctx.meshAxes->size(); ++i)
    if ((*ctx.meshAxes)[i] == name)
      return i;
  ctx.fail("the mesh has no axis '" + name + "'");
}

/// The group of the world ranks that differ from ctx.rank only along `axes` (the group of a
/// collective), made by the communicator the first time.
const CommGroup &groupOf(const kernels::KernelContext &ctx, const std::vector<std::string> &axes) {
  std::vector<bool> along(ctx.meshShape->size(), false);
  for (const auto &a : axes)
    along[axisIndex(ctx, a)] = true;
  std::string op = opName(ctx.op);
  const std::string kind = op.substr(op.rfind('.') + 1);
  if (std::all_of(along.begin(), along.end(), [](bool b) { return b; }))
    return ctx.comm->group({}, kind); // the whole world
  return ctx.comm->group(meshGroup(ctx.rank, *ctx.meshShape, along), kind);
}

void checkMesh(const kernels::KernelContext &ctx) {
  if (!ctx.meshShape || !ctx.meshAxes || ctx.meshShape->empty())
    ctx.fail("a collective step in a plan without a mesh");
}

/// Attribute `dim` of a collective (0 when unset) and the product of the dims before it.
int64_t dimAttr(const kernels::KernelContext &ctx) { return ctx.attrs.dim; }
int64_t outerOf(const std::vector<int64_t> &shape, int64_t dim) {
  int64_t outer = 1;
  for (int64_t d = 0; d < dim; ++d)
    outer *= shape[d];
  return outer;
}

/// A tensor cut into `parts` blocks along a dim is [outer][parts][chunk] in memory; collectives
/// exchange whole blocks, [parts][outer][chunk]. Reorders `src` into `dst` one way (toBlocks) or
/// the other: block p is `outer` rows of `chunk` bytes, one strided copy each (on the step's
/// device, so that it works on tensor memory of any device).
void reorderBlocks(const kernels::KernelContext &ctx, const void *src, void *dst, int64_t parts, int64_t outer,
                   size_t chunk, bool toBlocks) {
  const auto *in = static_cast<const uint8_t *>(src);
  auto *out = static_cast<uint8_t *>(dst);
  for (int64_t p = 0; p < parts; ++p) {
    size_t blockMajor = p * outer * chunk, interleaved = p * chunk, wide = parts * chunk;
    if (toBlocks)
      copyTensorRows(ctx.device, out + blockMajor, chunk, in + interleaved, wide, chunk, outer);
    else
      copyTensorRows(ctx.device, out + interleaved, wide, in + blockMajor, chunk, chunk, outer);
  }
}

// Temporaries of the collectives, in the device's tensor memory (grow-only scratch slots). Only
// the collectives that finish before they return use them: one left running uses none.
constexpr int kBlocksSlot = 0, kReceivedSlot = 1;
uint8_t *scratchBytes(const kernels::KernelContext &ctx, int slot, size_t bytes) {
  return static_cast<uint8_t *>(tensorScratch(ctx.device, slot, bytes));
}

ReduceOp reduceOpOf(const kernels::KernelContext &ctx) {
  return ctx.attrs.kind == kernels::ReductionKind::Max ? ReduceOp::Max : ReduceOp::Sum;
}

/// Reduces the inputs over the mesh axes (attribute `kind`: sum, the default, or max), each in
/// its output buffer; a bucket of several is one collective call. Left running.
std::unique_ptr<Work> allReduceKernel(kernels::KernelContext &ctx) {
  if (!ctx.comm)
    ctx.fail("needs a communicator (run the plan with cpc-run)");
  checkMesh(ctx);
  if (ctx.inputs.empty() || ctx.inputs.size() != ctx.outputs.size())
    ctx.fail("needs one output per input");
  DType type = ctx.inputs[0].dtype;
  std::vector<BufferRange> buffers;
  for (size_t i = 0; i < ctx.inputs.size(); ++i) {
    const TensorRef &in = ctx.inputs[i], &out = ctx.outputs[i];
    if (in.dtype != type)
      ctx.fail("a bucket must hold one element type");
    if (in.data != out.data)
      copyTensorBytes(ctx.device, out.data, in.data, in.bytes());
    buffers.push_back({out.data, out.numel()});
  }
  return ctx.comm->postAllReduce(buffers, type, groupOf(ctx, ctx.attrs.meshAxes), {reduceOpOf(ctx)});
}

/// Concatenates every group member's input along attribute `dim` (default 0), in the group's rank
/// order. The communicator stacks whole blocks: along dim 0 that is the result, left running;
/// along an inner dim they are interleaved after.
std::unique_ptr<Work> allGatherKernel(kernels::KernelContext &ctx) {
  const TensorRef &in = ctx.inputs.at(0), &out = ctx.outputs.at(0);
  if (!ctx.comm)
    ctx.fail("needs a communicator (run the plan with cpc-run)");
  checkMesh(ctx);
  int64_t dim = dimAttr(ctx);
  if (dim < 0 || dim >= in.rank() || out.rank() != in.rank() || in.shape[dim] == 0 || out.shape[dim] % in.shape[dim])
    ctx.fail("cannot gather along dim " + std::to_string(dim));
  const CommGroup &group = groupOf(ctx, ctx.attrs.meshAxes);
  int64_t outer = outerOf(in.shape, dim);
  if (outer == 1 || in.numel() == 0) // every rank has the same shapes: all skip the same steps
    return ctx.comm->postAllGather(in.data, out.data, in.numel(), in.dtype, group, {});
  uint8_t *blocks = scratchBytes(ctx, kBlocksSlot, out.bytes());
  ctx.comm->allGather(in.data, blocks, in.numel(), in.dtype, group);
  reorderBlocks(ctx, blocks, out.data, out.shape[dim] / in.shape[dim], outer, in.bytes() / outer, false);
  return nullptr;
}

/// Reduces the input over the group (attribute `kind`); this rank keeps block (its index in the
/// group) of attribute `dim` (default 0): left running. Along an inner dim the blocks are packed
/// one after another first, and the call finishes before it returns.
std::unique_ptr<Work> reduceScatterKernel(kernels::KernelContext &ctx) {
  const TensorRef &in = ctx.inputs.at(0), &out = ctx.outputs.at(0);
  if (!ctx.comm)
    ctx.fail("needs a communicator (run the plan with cpc-run)");
  checkMesh(ctx);
  int64_t dim = dimAttr(ctx);
  if (dim < 0 || (in.rank() > 0 && dim >= in.rank()) || out.rank() != in.rank() ||
      (in.rank() > 0 && (out.shape[dim] == 0 || in.shape[dim] % out.shape[dim])))
    ctx.fail("cannot scatter along dim " + std::to_string(dim));
  const CommGroup &group = groupOf(ctx, ctx.attrs.meshAxes);
  int64_t outer = outerOf(in.shape, dim);
  if (outer == 1 || in.numel() == 0)
    return ctx.comm->postReduceScatter(in.data, out.data, out.numel(), in.dtype, group, {reduceOpOf(ctx)});
  // Block j of the reduction is then contiguous.
  uint8_t *packed = scratchBytes(ctx, kBlocksSlot, in.bytes());
  reorderBlocks(ctx, in.data, packed, in.shape[dim] / out.shape[dim], outer, out.bytes() / outer, true);
  ctx.comm->reduceScatter(packed, out.data, out.numel(), in.dtype, reduceOpOf(ctx), group);
  return nullptr;
}

/// Moves the split of the group's axes from `concat_dim` to `split_dim`: this rank's value is
/// cut into one block per member along split_dim (packed one after another), the blocks are
/// exchanged, and the received ones are joined along concat_dim in the group's order.
std::unique_ptr<Work> allToAllKernel(kernels::KernelContext &ctx) {
  const TensorRef &in = ctx.inputs.at(0), &out = ctx.outputs.at(0);
  if (!ctx.comm)
    ctx.fail("needs a communicator (run the plan with cpc-run)");
  checkMesh(ctx);
  int64_t split = ctx.attrs.splitDim, concat = ctx.attrs.concatDim;
  const CommGroup &group = groupOf(ctx, ctx.attrs.meshAxes);
  int64_t n = group.size();
  if (split < 0 || split >= in.rank() || concat < 0 || concat >= in.rank() || split == concat ||
      out.rank() != in.rank() || in.shape[split] % n || out.shape[concat] != in.shape[concat] * n)
    ctx.fail("cannot move a split from dim " + std::to_string(concat) + " to dim " + std::to_string(split) +
             " among " + std::to_string(n) + " ranks");
  if (in.numel() == 0)
    return nullptr; // the same on every rank: nothing to exchange
  uint8_t *packed = scratchBytes(ctx, kBlocksSlot, in.bytes()), *received = scratchBytes(ctx, kReceivedSlot, in.bytes());
  int64_t outer = outerOf(in.shape, split);
  reorderBlocks(ctx, in.data, packed, n, outer, in.bytes() / outer / n, true);
  ctx.comm->allToAll(packed, received, in.numel() / n, in.dtype, group);
  outer = outerOf(out.shape, concat);
  reorderBlocks(ctx, received, out.data, n, outer, out.bytes() / outer / n, false);
  return nullptr;
}

/// The group of a rooted collective (one axis) and its root's position in it (its coordinate).
std::pair<const CommGroup *, int> rootedGroup(const kernels::KernelContext &ctx) {
  if (!ctx.comm)
    ctx.fail("needs a communicator (run the plan with cpc-run)");
  checkMesh(ctx);
  const auto &axes = ctx.attrs.meshAxes;
  if (axes.size() != 1)
    ctx.fail("takes exactly one mesh axis");
  int64_t root = ctx.attrs.root, size = (*ctx.meshShape)[axisIndex(ctx, axes[0])];
  if (root < 0 || root >= size)
    ctx.fail("root " + std::to_string(root) + " is outside axis '" + axes[0] + "'");
  return {&groupOf(ctx, axes), (int)root};
}

/// Every member of the group returns the value of the member at coordinate `root`.
std::unique_ptr<Work> broadcastFromKernel(kernels::KernelContext &ctx) {
  const TensorRef &in = ctx.inputs.at(0), &out = ctx.outputs.at(0);
  auto [group, root] = rootedGroup(ctx);
  if (in.data != out.data)
    copyTensorBytes(ctx.device, out.data, in.data, in.bytes());
  ctx.comm->broadcastFrom(out.data, out.numel(), out.dtype, root, *group);
  return nullptr;
}

/// The member at coordinate `root` returns the group's reduction (attribute `kind`), the others zeros.
std::unique_ptr<Work> reduceToKernel(kernels::KernelContext &ctx) {
  const TensorRef &in = ctx.inputs.at(0), &out = ctx.outputs.at(0);
  auto [group, root] = rootedGroup(ctx);
  if (in.data == out.data)
    ctx.fail("needs an output apart from its input");
  zeroTensorBytes(ctx.device, out.data, out.bytes()); // zeros of every float type are all-zero bits
  ctx.comm->reduceTo(in.data, out.data, in.numel(), in.dtype, reduceOpOf(ctx), root, *group);
  return nullptr;
}

/// Copies this rank's block: dim d is split into the product of its axes' sizes.
std::unique_ptr<Work> shardSliceKernel(kernels::KernelContext &ctx) {
  const TensorRef &in = ctx.inputs.at(0), &out = ctx.outputs.at(0);
  checkMesh(ctx);
  std::vector<std::vector<std::string>> dimAxes;
  try {
    dimAxes = ctx.attrs.sharding.at("dim_axes").get<std::vector<std::vector<std::string>>>();
  } catch (const nlohmann::json::exception &) {
    ctx.fail("attribute 'sharding' has no list of axes per dim ('dim_axes')");
  }
  std::vector<int64_t> starts = blockStarts(*ctx.meshShape, *ctx.meshAxes, ctx.rank, dimAxes, out.shape);
  if (!ctx.device || ctx.device->kind() == DeviceKind::Cpu) {
    copyBlock(in.data, in.shape, out.data, out.shape, starts, dtypeSize(in.dtype), true);
    return nullptr;
  }
  // On a device: one strided copy per block of the two innermost dims.
  const size_t es = dtypeSize(in.dtype);
  const int64_t rank = out.rank();
  if (rank == 0) {
    copyTensorBytes(ctx.device, out.data, in.data, es);
    return nullptr;
  }
  std::vector<int64_t> strides(rank, 1);
  for (int64_t d = rank - 2; d >= 0; --d)
    strides[d] = strides[d + 1] * in.shape[d + 1];
  const int64_t inner = out.shape.back(), height = rank >= 2 ? out.shape[rank - 2] : 1;
  int64_t planes = 1;
  for (int64_t d = 0; d + 2 < rank; ++d)
    planes *= out.shape[d];
  for (int64_t plane = 0; plane < planes; ++plane) {
    int64_t offset = starts.back() + (rank >= 2 ? starts[rank - 2] * strides[rank - 2] : 0), rest = plane;
    for (int64_t d = rank - 3; d >= 0; --d) {
      offset += (starts[d] + rest % out.shape[d]) * strides[d];
      rest /= out.shape[d];
    }
    copyTensorRows(ctx.device, static_cast<uint8_t *>(out.data) + plane * height * inner * es, inner * es,
                   static_cast<const uint8_t *>(in.data) + offset * es, (rank >= 2 ? strides[rank - 2] : inner) * es,
                   inner * es, height);
  }
  return nullptr;
}

/// The world rank of this rank's peer: its coordinates with the one of `axis` set to `peer`.
int peerRank(const kernels::KernelContext &ctx) {
  checkMesh(ctx);
  int64_t axis = axisIndex(ctx, ctx.attrs.meshAxis), peer = ctx.attrs.peer;
  std::vector<int64_t> coords = meshCoordinates(ctx.rank, *ctx.meshShape);
  if (peer < 0 || peer >= (*ctx.meshShape)[axis])
    ctx.fail("peer " + std::to_string(peer) + " is outside the mesh");
  coords[axis] = peer;
  int64_t rank = meshRank(coords, *ctx.meshShape);
  if (rank == ctx.rank)
    ctx.fail("the peer is this rank");
  return (int)rank;
}

/// The message tag of a send or receive: its channel and the microbatch being run.
int64_t tagOf(const kernels::KernelContext &ctx) {
  int64_t channel = ctx.attrs.channel, microbatch = ctx.microbatch ? *ctx.microbatch : 0;
  if (channel < 0 || channel >= kChannelsPerTag || microbatch < 0 || microbatch >= kMaxMicrobatches)
    ctx.fail("channel " + std::to_string(channel) + " or microbatch " + std::to_string(microbatch) + " out of range");
  return pointToPointTag(channel, microbatch, std::max<int64_t>(ctx.channels, channel + 1));
}

std::unique_ptr<Work> sendKernel(kernels::KernelContext &ctx) {
  if (!ctx.comm)
    ctx.fail("needs a communicator (run the plan with cpc-run)");
  const TensorRef &in = ctx.inputs.at(0);
  ctx.comm->sendBuffered(in.data, in.bytes(), peerRank(ctx), tagOf(ctx));
  return nullptr;
}

std::unique_ptr<Work> recvKernel(kernels::KernelContext &ctx) {
  if (!ctx.comm)
    ctx.fail("needs a communicator (run the plan with cpc-run)");
  const TensorRef &out = ctx.outputs.at(0);
  ctx.comm->recv(out.data, out.bytes(), peerRank(ctx), tagOf(ctx));
  return nullptr;
}

} // namespace

CollectiveKernelFn findCollectiveKernel(OpKind op) {
  static const std::map<OpKind, CollectiveKernelFn> kernels = {
      {OpKind::Send, sendKernel},
      {OpKind::Recv, recvKernel},
      {OpKind::AllReduce, allReduceKernel},
      {OpKind::ShardSlice, shardSliceKernel},
      {OpKind::AllGather, allGatherKernel},
      {OpKind::ReduceScatter, reduceScatterKernel},
      {OpKind::AllToAll, allToAllKernel},
      {OpKind::BroadcastFrom, broadcastFromKernel},
      {OpKind::ReduceTo, reduceToKernel},
  };
  auto it = kernels.find(op);
  return it == kernels.end() ? nullptr : it->second;
}

} // namespace cpc
