//===- CollectiveKernelsTest.cpp - collective kernels, run under mpirun -np N ---===//
//
// The kernels of cpc.all_gather, cpc.all_reduce, cpc.all_to_all, cpc.reduce_scatter and cpc.shard_slice as the executor calls them, on a real
// communicator. A plain program like CommunicatorTest: every rank runs every check in order.
//
#include "runtime/CollectiveKernels.h"
#include "runtime/Communicator.h"
#include "tests/mpi/MpiCheck.h"

#include <cstdio>
#include <cstdlib>
#include <string>

using namespace cpc;
using namespace cpc::mpitest;

namespace {


struct Mesh {
  std::vector<int64_t> shape;
  std::vector<std::string> axes;
};

/// Runs the collective kernel of `op` on this rank.
void runKernel(Communicator &comm, const Mesh &mesh, OpKind op, TensorRef in, TensorRef out,
               const nlohmann::json &attrs) {
  CollectiveKernelFn fn = findCollectiveKernel(op);
  if (!fn)
    throw RuntimeError(std::string("no kernel for ") + opName(op));
  kernels::KernelContext ctx;
  ctx.op = op;
  ctx.inputs = {in};
  ctx.outputs = {out};
  ctx.setAttrs(attrs);
  ctx.comm = &comm;
  ctx.rank = comm.rank();
  ctx.meshShape = &mesh.shape;
  ctx.meshAxes = &mesh.axes;
  if (std::unique_ptr<Work> work = fn(ctx)) // left running: complete it as the executor would
    work->wait();
}

TensorRef ref(std::vector<float> &v, std::vector<int64_t> shape) {
  TensorRef r;
  r.data = v.data();
  r.shape = std::move(shape);
  return r;
}

/// Every rank holds the same [4n, 3n, 2n] tensor; it keeps its block along `dim` (shard_slice)
/// and gathers the blocks back along `dim` (all_gather): the round trip gives the whole tensor.
void roundTrip(Communicator &comm, int64_t dim, bool setDim) {
  const int64_t n = comm.size();
  Mesh mesh{{n}, {"dp"}};
  std::vector<int64_t> shape = {4 * n, 3 * n, 2 * n}, block = shape;
  block[dim] /= n;
  std::vector<float> whole(4 * 3 * 2 * n * n * n), mine(whole.size() / n), back(whole.size(), -1);
  for (size_t i = 0; i < whole.size(); ++i)
    whole[i] = float(i);
  nlohmann::json dims = nlohmann::json::array();
  for (int64_t d = 0; d < 3; ++d)
    dims.push_back(d == dim ? std::vector<std::string>{"dp"} : std::vector<std::string>{});
  runKernel(comm, mesh, OpKind::ShardSlice, ref(whole, shape), ref(mine, block), {{"sharding", {{"dim_axes", dims}}}});
  nlohmann::json attrs = {{"mesh", "mesh"}, {"mesh_axes", {"dp"}}};
  if (setDim)
    attrs["dim"] = dim;
  runKernel(comm, mesh, OpKind::AllGather, ref(mine, block), ref(back, shape), attrs);
  check(back == whole, "slice then gather along dim " + std::to_string(dim));
}

/// On a 2 x (n/2) mesh (dp, tp), gathering over tp along dim 1 joins the blocks of the ranks
/// that share this rank's dp coordinate, in tp order.
void groupAlongInnerDim(Communicator &comm) {
  const int n = comm.size(), r = comm.rank();
  if (n % 2)
    return;
  const int64_t tp = n / 2;
  Mesh mesh{{2, tp}, {"dp", "tp"}};
  std::vector<float> mine(2 * 1 * 2), all(2 * tp * 2, -1);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j)
      mine[i * 2 + j] = float(100 * r + 10 * i + j);
  runKernel(comm, mesh, OpKind::AllGather, ref(mine, {2, 1, 2}), ref(all, {2, tp, 2}), {{"mesh", "mesh"}, {"mesh_axes", {"tp"}}, {"dim", 1}});
  bool ok = true;
  int dpRow = r / tp;
  for (int i = 0; i < 2; ++i)
    for (int64_t t = 0; t < tp; ++t)
      for (int j = 0; j < 2; ++j)
        ok = ok && all[(i * tp + t) * 2 + j] == float(100 * (dpRow * tp + t) + 10 * i + j);
  check(ok, "gather over tp along dim 1");
}

/// Pipeline stages on a dp x pp mesh (pp = 2): stage 0 sends its [2, 3] activation to stage 1 of
/// its own dp row (cpc.send, peer 1) and stage 1 receives it (cpc.recv, peer 0); the value then
/// goes back on another channel. Each pair talks only within its dp row.
void sendRecvBetweenStages(Communicator &comm) {
  const int n = comm.size(), r = comm.rank();
  if (n % 2)
    return;
  Mesh mesh{{n / 2, 2}, {"dp", "pp"}};
  const int stage = r % 2, row = r / 2;
  auto runP2p = [&](OpKind op, std::vector<TensorRef> ins, std::vector<TensorRef> outs,
                    const nlohmann::json &attrs) {
    kernels::KernelContext ctx;
    ctx.op = op;
    ctx.inputs = std::move(ins);
    ctx.outputs = std::move(outs);
    ctx.setAttrs(attrs);
    ctx.comm = &comm;
    ctx.rank = r;
    ctx.meshShape = &mesh.shape;
    ctx.meshAxes = &mesh.axes;
    findCollectiveKernel(op)(ctx);
  };
  std::vector<float> act(6), got(6, -1.f);
  for (int i = 0; i < 6; ++i)
    act[i] = float(100 * row + i);
  if (stage == 0) {
    runP2p(OpKind::Send, {ref(act, {2, 3})}, {}, {{"mesh", "mesh"}, {"mesh_axis", "pp"}, {"peer", 1}, {"channel", 0}});
    runP2p(OpKind::Recv, {}, {ref(got, {2, 3})}, {{"mesh", "mesh"}, {"mesh_axis", "pp"}, {"peer", 1}, {"channel", 1}});
    check(got == act, "stage 0 gets its activation back from stage 1");
  } else {
    runP2p(OpKind::Recv, {}, {ref(got, {2, 3})}, {{"mesh", "mesh"}, {"mesh_axis", "pp"}, {"peer", 0}, {"channel", 0}});
    check(got == act, "stage 1 receives its dp row's activation");
    runP2p(OpKind::Send, {ref(got, {2, 3})}, {}, {{"mesh", "mesh"}, {"mesh_axis", "pp"}, {"peer", 0}, {"channel", 1}});
  }
  // Sends are buffered (a copy goes out; the sender never waits for the receiver): the copies
  // are released at the end of the step.
  check(comm.bufferedSendBytes() == 24, "one buffered send of 24 B per rank");
  comm.completeSends();
  check(comm.bufferedSendBytes() == 0, "completed sends release their copies");
  // The same channel in two microbatches: the tag keeps them apart, whatever order they arrive.
  int64_t microbatch = 0;
  auto runTagged = [&](OpKind op, std::vector<float> &v, int64_t peer, int64_t mb) {
    kernels::KernelContext ctx;
    nlohmann::json attrs = {{"mesh", "mesh"}, {"mesh_axis", "pp"}, {"peer", peer}, {"channel", 5}};
    ctx.op = op;
    (op == OpKind::Send ? ctx.inputs : ctx.outputs).push_back(ref(v, {2, 3}));
    ctx.setAttrs(attrs);
    ctx.comm = &comm;
    ctx.rank = r;
    ctx.meshShape = &mesh.shape;
    ctx.meshAxes = &mesh.axes;
    microbatch = mb;
    ctx.microbatch = &microbatch;
    findCollectiveKernel(op)(ctx);
  };
  std::vector<float> first(6, 1.f), second(6, 2.f), a(6), b(6);
  if (stage == 0) {
    runTagged(OpKind::Send, first, 1, 0);
    runTagged(OpKind::Send, second, 1, 1);
  } else {
    runTagged(OpKind::Recv, b, 0, 1); // microbatch 1 first
    runTagged(OpKind::Recv, a, 0, 0);
    check(a == first && b == second, "messages of one channel are matched by microbatch");
  }
  comm.completeSends();
  bool threw = false;
  try {
    runP2p(OpKind::Send, {ref(act, {2, 3})}, {}, {{"mesh", "mesh"}, {"mesh_axis", "pp"}, {"peer", stage}, {"channel", 2}});
  } catch (const RuntimeError &e) {
    threw = std::string(e.what()).find("the peer is this rank") != std::string::npos;
  }
  check(threw, "a send to this rank's own coordinate is refused");
}

/// The all_reduce kernel with kind "max" (as the plan writes `#cpc.reduction<max>`) gives every
/// rank the element-wise maximum over the tp group; without "kind" it sums.
void allReduceKinds(Communicator &comm) {
  const int n = comm.size(), r = comm.rank();
  Mesh mesh{{n}, {"tp"}};
  std::vector<float> mine = {float(r), float(-r), float(r % 2)}, out(3);
  runKernel(comm, mesh, OpKind::AllReduce, ref(mine, {3}), ref(out, {3}), {{"mesh", "mesh"}, {"mesh_axes", {"tp"}}, {"kind", "max"}});
  check(out == std::vector<float>{float(n - 1), 0.f, n > 1 ? 1.f : 0.f}, "all_reduce kind max");
  runKernel(comm, mesh, OpKind::AllReduce, ref(mine, {3}), ref(out, {3}), {{"mesh", "mesh"}, {"mesh_axes", {"tp"}}});
  check(out[0] == float(n * (n - 1) / 2) && out[1] == -out[0], "all_reduce without kind sums");
  try {
    runKernel(comm, mesh, OpKind::AllReduce, ref(mine, {3}), ref(out, {3}), {{"mesh", "mesh"}, {"mesh_axes", {"tp"}}, {"kind", "mean"}});
    check(false, "all_reduce kind mean: no error");
  } catch (const RuntimeError &e) {
    check(std::string(e.what()).find("mean") != std::string::npos, std::string("bad kind message '") + e.what() + "'");
  }
}

/// The all_to_all kernel moves a split over all ranks from dim 0 to dim 1 of a [2n, 3, 2n]
/// tensor: slicing along dim 0 and moving gives the same block as slicing along dim 1; moving
/// back gives the first block again.
void allToAllMovesSplit(Communicator &comm) {
  const int64_t n = comm.size();
  Mesh mesh{{n}, {"tp"}};
  std::vector<int64_t> shape = {2 * n, 3, 2 * n};
  std::vector<float> whole(2 * n * 3 * 2 * n);
  for (size_t i = 0; i < whole.size(); ++i)
    whole[i] = float(i);
  auto slice = [&](int64_t dim) {
    std::vector<int64_t> block = shape;
    block[dim] /= n;
    std::vector<float> out(whole.size() / n);
    nlohmann::json dims = nlohmann::json::array();
    for (int64_t d = 0; d < 3; ++d)
      dims.push_back(d == dim ? std::vector<std::string>{"tp"} : std::vector<std::string>{});
    runKernel(comm, mesh, OpKind::ShardSlice, ref(whole, shape), ref(out, block), {{"sharding", {{"dim_axes", dims}}}});
    return out;
  };
  std::vector<float> rows = slice(0), cols = slice(2), moved(rows.size(), -1), back(rows.size(), -1);
  runKernel(comm, mesh, OpKind::AllToAll, ref(rows, {2, 3, 2 * n}), ref(moved, {2 * n, 3, 2}),
            {{"mesh", "mesh"}, {"mesh_axes", {"tp"}}, {"split_dim", 2}, {"concat_dim", 0}});
  check(moved == cols, "all_to_all moves the split from dim 0 to dim 2");
  runKernel(comm, mesh, OpKind::AllToAll, ref(moved, {2 * n, 3, 2}), ref(back, {2, 3, 2 * n}),
            {{"mesh", "mesh"}, {"mesh_axes", {"tp"}}, {"split_dim", 0}, {"concat_dim", 2}});
  check(back == rows, "all_to_all moves it back");
}

/// reduce_scatter along dim 1 of a [2, 2n] tensor: rank r keeps columns [2r, 2r+2) of the sum.
void reduceScatterInnerDim(Communicator &comm) {
  const int64_t n = comm.size(), r = comm.rank();
  Mesh mesh{{n}, {"tp"}};
  std::vector<float> mine(2 * 2 * n), out(2 * 2, -1);
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 2 * n; ++j)
      mine[i * 2 * n + j] = float(100 * i + j + r);
  runKernel(comm, mesh, OpKind::ReduceScatter, ref(mine, {2, 2 * n}), ref(out, {2, 2}), {{"mesh", "mesh"}, {"mesh_axes", {"tp"}}, {"dim", 1}});
  bool ok = true;
  float ranks = float(n * (n - 1) / 2);
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 2; ++j)
      ok = ok && out[i * 2 + j] == float(n * (100 * i + 2 * r + j)) + ranks;
  check(ok, "reduce_scatter along dim 1 keeps this rank's columns of the sum");
}

void badDim(Communicator &comm) {
  Mesh mesh{{comm.size()}, {"dp"}};
  std::vector<float> in(2), out(2 * comm.size());
  try {
    runKernel(comm, mesh, OpKind::AllGather, ref(in, {2}), ref(out, {2 * comm.size()}), {{"mesh", "mesh"}, {"mesh_axes", {"dp"}}, {"dim", 1}});
    check(false, "gather along a dim the tensor lacks: no error");
  } catch (const RuntimeError &e) {
    check(std::string(e.what()).find("cannot gather along dim 1") != std::string::npos,
          std::string("bad dim message '") + e.what() + "'");
  }
}

} // namespace

int main() {
  std::unique_ptr<Communicator> comm = start();
  if (!comm)
    return 1;
  try {
    roundTrip(*comm, 0, false); // dim unset: 0, as ZeRO's gathers
    roundTrip(*comm, 0, true);
    roundTrip(*comm, 1, true);
    roundTrip(*comm, 2, true);
    groupAlongInnerDim(*comm);
    badDim(*comm);
    allReduceKinds(*comm);
    allToAllMovesSplit(*comm);
    reduceScatterInnerDim(*comm);
    sendRecvBetweenStages(*comm);
  } catch (const std::exception &e) {
    check(false, std::string("unexpected error: ") + e.what());
  }
  return finish(*comm);
}
