//===- Zero.cpp - ZeRO as shardings of the optimizer over the dp axis -----===//
//
// ZeRO is not a rewrite of its own: this pass only adds sharding seeds, and propagation and
// partitioning (cpc-data-parallel runs both) derive the per-rank program, so that it composes
// with whatever tensor parallelism split before it. For every AdamW update it picks one dim of
// the parameter that is whole (not split over tp) and divides by dp, and asks for the update
// split over dp there (stage 1): the moments follow (each rank stores 1/dp of them), the
// gradient is sliced (a cpc.shard keeps it whole up to the update: all-reduced, as the norm
// reads it), and the updated parameter is
// all-gathered into its variable. Stage 2 also splits the gradient's square in the global norm
// the same way, so that partitioning reduce-scatters the gradient instead of all-reducing it
// and the norm's terms stay partial sums over dp, reduced once. Stage 3 also stores the
// parameter split over dp and reads it through a cpc.shard (its tp layout) right before each
// op that uses it: partitioning gathers the blocks there, so the whole value lives only until
// that op. Parameters with no such dim keep a whole optimizer.
//
#include "dialects/cpc/Roles.h"
#include "passes/Passes.h"
#include "passes/Sharding.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/StringMap.h"

namespace cpc {
#define GEN_PASS_DEF_CPCZERO
#include "passes/Passes.h.inc"
} // namespace cpc

using namespace mlir;
using namespace cpc;

namespace {

/// After every tensor-parallel seed (parameters 1, sequence-parallel regions 2): ZeRO only
/// splits dims that those left whole.
constexpr int64_t kZeroPriority = 8;

/// How one parameter is placed: `read` is its layout where ops use it (its tp split, if any),
/// `stored` the same with dp on one more dim.
struct Placement {
  Layout read, stored;
  int64_t readPriority = 0;
};

struct CpcZeroPass : cpc::impl::CpcZeroBase<CpcZeroPass> {
  using CpcZeroBase::CpcZeroBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (stage < 1 || stage > 3) {
      module.emitError("ZeRO stage ") << stage << " does not exist (stages 1, 2 and 3 do)";
      return signalPassFailure();
    }
    if (dp < 2) {
      module.emitError("cpc-zero shards over dp: it needs dp >= 2");
      return signalPassFailure();
    }
    FailureOr<MeshOp> meshOp = getOrCreateMesh(module, {{"dp", dp}});
    if (failed(meshOp))
      return signalPassFailure();
    Mesh mesh(*meshOp);
    FailureOr<SmallVector<func::FuncOp>> updating = functionsOrPhases(module, funcs, {Phase::TrainStep, Phase::Apply});
    FailureOr<SmallVector<func::FuncOp>> reading =
        functionsOrPhases(module, funcs, {Phase::TrainStep, Phase::Accumulate, Phase::Apply});
    if (failed(updating) || failed(reading))
      return signalPassFailure();
    llvm::StringMap<Placement> placements;
    for (func::FuncOp func : *updating)
      func.walk([&](AdamWOp op) {
        std::optional<Placement> p = placeUpdate(op, mesh);
        if (!p)
          return;
        if (stage >= 2)
          splitNormTerm(op, p->stored, mesh);
        if (stage == 3)
          if (auto param = op.getParam().getDefiningOp<ParameterOp>())
            placements[param.getName()] = *p;
      });
    if (stage == 3)
      for (func::FuncOp func : *reading)
        storeSplit(func, placements, mesh);
  }

  /// The layout a parameter read has been given by the passes before (its tp split), or whole.
  static std::pair<Layout, int64_t> seededLayout(ParameterOp param) {
    if (auto list = param->getAttrOfType<ArrayAttr>(kResultShardingsAttr)) {
      auto attr = llvm::cast<ShardingAttr>(list[0]);
      return {Layout::fromAttr(attr), attr.getPriority()};
    }
    return {Layout::whole(param.getType().getRank()), 0};
  }

  /// Seeds the update's results split over dp on the first dim that is whole and divides.
  std::optional<Placement> placeUpdate(AdamWOp op, const Mesh &mesh) {
    auto param = op.getParam().getDefiningOp<ParameterOp>();
    if (!param)
      return std::nullopt;
    auto [read, priority] = seededLayout(param);
    RankedTensorType type = param.getType();
    int64_t ranks = mesh.parts({"dp"});
    if (read.uses("dp"))
      return std::nullopt;
    for (int64_t d = 0; d < type.getRank(); ++d) {
      if (!read.dims[d].empty() || type.getDimSize(d) % ranks)
        continue;
      Placement p{read, read, priority};
      p.stored.dims[d] = {"dp"};
      ShardingAttr attr = p.stored.toAttr(mesh.ref(), kZeroPriority);
      op->setAttr(kResultShardingsAttr, ArrayAttr::get(op.getContext(), {attr, attr, attr}));
      if (stage == 1) { // the gradient is reduced whole (as the norm reads it) and sliced here
        OpBuilder b(op);
        auto whole = b.create<ShardOp>(op.getLoc(), op.getGrad().getType(), op.getGrad(),
                                       read.toAttr(mesh.ref(), kZeroPriority));
        op.getGradMutable().assign(whole.getResult());
      }
      return p;
    }
    return std::nullopt;
  }

  /// Stage 2: the gradient's term of the global norm, reduce_sum(g * g), squares this rank's
  /// block only (the clip scales g after the norm: the update reads g or g * coef).
  void splitNormTerm(AdamWOp op, const Layout &stored, const Mesh &mesh) {
    Value grad = op.getGrad();
    if (auto mul = grad.getDefiningOp<MulOp>()) {
      auto scalar = [](Value v) { return llvm::cast<RankedTensorType>(v.getType()).getRank() == 0; };
      if (scalar(mul.getRhs()))
        grad = mul.getLhs();
      else if (scalar(mul.getLhs()))
        grad = mul.getRhs();
    }
    for (Operation *user : grad.getUsers())
      if (auto square = llvm::dyn_cast<MulOp>(user))
        if (square.getLhs() == grad && square.getRhs() == grad)
          square->setAttr(kResultShardingsAttr,
                          ArrayAttr::get(op.getContext(), {stored.toAttr(mesh.ref(), kZeroPriority)}));
  }

  static bool isNarrowingFloatCast(CastOp cast) {
    auto from = llvm::dyn_cast<FloatType>(cast.getInput().getType().getElementType());
    auto to = llvm::dyn_cast<FloatType>(cast.getType().getElementType());
    return from && to && to.getWidth() < from.getWidth();
  }

  /// Stage 3: the parameters of `placements` are stored split over dp; every op but the update
  /// reads them through a cpc.shard of their read layout placed right before it.
  void storeSplit(func::FuncOp func, const llvm::StringMap<Placement> &placements, const Mesh &mesh) {
    SmallVector<ParameterOp> params;
    func.walk([&](ParameterOp op) {
      if (placements.count(op.getName()))
        params.push_back(op);
    });
    for (ParameterOp param : params) {
      const Placement &p = placements.lookup(param.getName());
      param->setAttr(kResultShardingsAttr,
                     ArrayAttr::get(param.getContext(), {p.stored.toAttr(mesh.ref(), p.readPriority)}));
      SmallVector<Operation *> users;
      for (Operation *user : param->getUsers())
        if (!isParameterUpdate(user, param.getName()) && !llvm::is_contained(users, user))
          users.push_back(user);
      for (Operation *user : users) {
        // Mixed precision reads the parameter through a cast to 16 bits: the block is cast and
        // the 16-bit copy gathered (half the bytes of gathering the f32 block).
        auto cast = llvm::dyn_cast<CastOp>(user);
        if (cast && isNarrowingFloatCast(cast)) {
          OpBuilder b(cast);
          b.setInsertionPointAfter(cast);
          auto read = b.create<ShardOp>(cast.getLoc(), cast.getType(), cast.getResult(),
                                        p.read.toAttr(mesh.ref(), p.readPriority));
          cast.getResult().replaceAllUsesExcept(read.getResult(), read);
          continue;
        }
        OpBuilder b(user);
        auto read = b.create<ShardOp>(user->getLoc(), param.getType(), param.getResult(),
                                          p.read.toAttr(mesh.ref(), p.readPriority));
        user->replaceUsesOfWith(param.getResult(), read.getResult());
      }
    }
  }
};

} // namespace
