//===- Zero.cpp - ZeRO as shardings of the optimizer over the dp axis -----===//
//
// ZeRO is not a rewrite of its own: this pass only adds sharding seeds, and propagation and
// partitioning (cpc-data-parallel runs both) derive the per-rank program, so that it composes
// with whatever tensor parallelism split before it. For every AdamW update it picks one dim of
// the parameter that is whole (not split over tp) and divides by dp (UpdatePlacement.h), and
// asks for the update split over dp there (stage 1): the moments follow (each rank stores 1/dp
// of them), and the updated parameter is all-gathered into its variable. In mixed precision a
// master weight read only through its 16-bit copy is stored split instead, and the copy is
// gathered (readOnlyNarrowed). The gradient's square in the global norm is split the same way
// at every stage: each rank squares the block it updates. Stage 1 keeps the gradient whole
// (all-reduced) and slices it where it is read (keepWhole); stage 2 does not, so partitioning
// reduce-scatters it and the norm's terms stay partial sums over dp, reduced once. Stage 3 also
// stores the parameter split over dp and reads it through a cpc.shard (its tp layout) right
// before each op that uses it: partitioning gathers the blocks there, so the whole value lives
// only until that op. Parameters with no such dim keep a whole optimizer.
//
#include "dialects/cpc/Roles.h"
#include "passes/Passes.h"
#include "passes/Sharding.h"
#include "passes/UpdatePlacement.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/StringMap.h"

namespace cpc {
#define GEN_PASS_DEF_CPCZERO
#include "passes/Passes.h.inc"
} // namespace cpc

using namespace mlir;
using namespace cpc;

namespace {

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
        seedNormSquares(op, p->stored, mesh); // each rank squares the block it updates
        if (auto param = op.getParam().getDefiningOp<ParameterOp>())
          if (stage == 3 || readOnlyNarrowed(*reading, param.getName()))
            placements[param.getName()] = *p;
      });
    if (!placements.empty())
      for (func::FuncOp func : *reading)
        storeSplit(func, placements, mesh);
  }

  /// Seeds the update's results split over dp on the first dim that is whole and divides.
  std::optional<Placement> placeUpdate(AdamWOp op, const Mesh &mesh) {
    std::optional<Layout> stored = updateSplit(op, "dp", mesh.parts({"dp"}));
    if (!stored)
      return std::nullopt;
    auto [read, priority] = parameterReadLayout(op.getParam().getDefiningOp<ParameterOp>());
    Placement p{read, *stored, priority};
    ShardingAttr attr = p.stored.toAttr(mesh.ref(), kZeroPriority);
    op->setAttr(kResultShardingsAttr, ArrayAttr::get(op.getContext(), {attr, attr, attr}));
    if (stage == 1) // the gradient is reduced whole and sliced where it is read
      keepWhole(op, read.toAttr(mesh.ref(), kZeroPriority));
    return p;
  }

  /// Stage 1: the update's gradient kept whole (`whole`) from where backward makes it: every
  /// reader (the norm's squares, the clip's scale, the update) reads it through one cpc.shard,
  /// and partitioning slices it where the norm and the update take their blocks. Behind scales
  /// by scalars (the clip, fp16's unscale) and a widening cast (mixed precision's 16-bit gradient, widened to
  /// f32 for the update), the value kept whole is the one before them: a rank holds 2 bytes per
  /// element of the whole gradient, not 4, as DeepSpeed counts it, and widens its block only.
  static void keepWhole(AdamWOp op, ShardingAttr whole) {
    Value source = op.getGrad();
    while (Value scaled = scaledOperand(source)) // the clip's, fp16's unscale, 1/accumulation
      source = scaled;
    if (auto cast = source.getDefiningOp<CastOp>(); cast && isWideningFloatCast(cast))
      source = cast.getInput();
    OpBuilder b(op);
    b.setInsertionPointAfterValue(source);
    auto shard = b.create<ShardOp>(op.getLoc(), source.getType(), source, whole);
    source.replaceAllUsesExcept(shard.getResult(), shard);
  }

  /// The bits a float-to-float cast adds per element (negative: it narrows; 0 for other casts).
  static int floatWidthChange(CastOp cast) {
    auto from = llvm::dyn_cast<FloatType>(cast.getInput().getType().getElementType());
    auto to = llvm::dyn_cast<FloatType>(cast.getType().getElementType());
    return from && to ? int(to.getWidth()) - int(from.getWidth()) : 0;
  }
  static bool isNarrowingFloatCast(CastOp cast) { return floatWidthChange(cast) < 0; }
  static bool isWideningFloatCast(CastOp cast) { return floatWidthChange(cast) > 0; }

  /// Whether the forward and backward read parameter `name` only through casts to 16 bits (mixed
  /// precision's copy of an f32 master weight). Stages 1 and 2 then store the master split over
  /// dp with the moments, as DeepSpeed does: the update writes this rank's block alone, and the
  /// 16-bit copy is gathered once per step (half the bytes of gathering the updated f32 blocks).
  /// A parameter some op reads in f32 (a norm's scale) keeps its master whole: splitting it
  /// would gather it before every such read.
  static bool readOnlyNarrowed(ArrayRef<func::FuncOp> funcs, StringRef name) {
    bool narrowed = false, other = false;
    for (func::FuncOp func : funcs)
      func.walk([&](ParameterOp param) {
        if (param.getName() != name)
          return;
        for (Operation *user : param->getUsers()) {
          if (isParameterUpdate(user, name))
            continue;
          auto cast = llvm::dyn_cast<CastOp>(user);
          (cast && isNarrowingFloatCast(cast) ? narrowed : other) = true;
        }
      });
    return narrowed && !other;
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
      // Stage 3 stores the parameter split in its reads' tier. A master of stage 1 or 2 only in
      // ZeRO's: seeded earlier, the update would lay its split on the gradient's 16-bit source
      // (before the cpc.shard that keeps it whole is seeded), which is then reduce-scattered
      // and gathered again.
      int64_t priority = stage == 3 ? p.readPriority : kZeroPriority;
      param->setAttr(kResultShardingsAttr, ArrayAttr::get(param.getContext(), {p.stored.toAttr(mesh.ref(), priority)}));
      SmallVector<Operation *> users;
      for (Operation *user : param->getUsers())
        if (!isParameterUpdate(user, param.getName()) && !llvm::is_contained(users, user))
          users.push_back(user);
      for (Operation *user : users) {
        // Mixed precision reads the parameter through a cast to 16 bits: the block is cast and
        // the 16-bit copy gathered (half the bytes of gathering the f32 block). Stage 3 gathers
        // it right before each op that reads it; stages 1 and 2 once, and keep it for the step.
        auto cast = llvm::dyn_cast<CastOp>(user);
        if (cast && isNarrowingFloatCast(cast)) {
          ShardingAttr layout = p.read.toAttr(mesh.ref(), p.readPriority);
          if (stage == 3) {
            SmallVector<OpOperand *> uses;
            for (OpOperand &use : cast.getResult().getUses())
              uses.push_back(&use);
            for (OpOperand *use : uses) {
              OpBuilder b(use->getOwner());
              use->set(b.create<ShardOp>(cast.getLoc(), cast.getType(), cast.getResult(), layout).getResult());
            }
            continue;
          }
          OpBuilder b(cast);
          b.setInsertionPointAfter(cast);
          auto read = b.create<ShardOp>(cast.getLoc(), cast.getType(), cast.getResult(), layout);
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
