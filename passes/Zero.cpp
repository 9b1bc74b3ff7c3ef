//===- Zero.cpp - ZeRO placement of the optimizer over the dp axis --------===//
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

namespace cpc {
#define GEN_PASS_DEF_CPCZERO
#include "passes/Passes.h.inc"
} // namespace cpc

using namespace mlir;
using namespace cpc;

namespace {

struct CpcZeroPass : cpc::impl::CpcZeroBase<CpcZeroPass> {
  using CpcZeroBase::CpcZeroBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto mesh = module.lookupSymbol<MeshOp>("mesh");
    if (!mesh || mesh.getAxisSize("dp") < 1) {
      module.emitError("cpc-zero needs the dp mesh of cpc-data-parallel");
      return signalPassFailure();
    }
    if (stage != 1) {
      module.emitError("ZeRO stage ") << stage << " is not available yet (stage 1 is)";
      return signalPassFailure();
    }
    int64_t ranks = mesh.getAxisSize("dp");
    for (const std::string &name : funcs) {
      auto func = module.lookupSymbol<func::FuncOp>(name);
      if (!func) {
        module.emitError("no function @") << name;
        return signalPassFailure();
      }
      SmallVector<AdamWOp> updates;
      func.walk([&](AdamWOp op) { updates.push_back(op); });
      for (AdamWOp op : updates)
        if (failed(shardUpdate(op, ranks)))
          return signalPassFailure();
    }
  }

  /// adamw(p, g, m, v) -> all_gather(adamw(p[r], g[r], m_r, v_r)): rank r keeps and updates block r
  /// of the flattened parameter; its moments are states of that block's size.
  LogicalResult shardUpdate(AdamWOp op, int64_t ranks) {
    auto type = op.getParam().getType();
    int64_t n = type.getNumElements();
    if (n % ranks)
      return success(); // too small or odd-sized: keep this parameter's optimizer whole
    auto m = op.getExpAvg().getDefiningOp<StateOp>(), v = op.getExpAvgSq().getDefiningOp<StateOp>();
    if (!m || !v)
      return op.emitError("ZeRO expects the moments to be states");
    OpBuilder b(op);
    Location loc = op.getLoc();
    MLIRContext *ctx = op.getContext();
    auto flat = RankedTensorType::get({n}, type.getElementType());
    auto shard = RankedTensorType::get({n / ranks}, type.getElementType());
    auto sharding = ShardingAttr::get(ctx, FlatSymbolRefAttr::get(ctx, "mesh"),
                                      b.getArrayAttr({b.getStrArrayAttr({"dp"})}), ArrayAttr());
    auto slice = [&](Value v) {
      Value f = b.create<ReshapeOp>(loc, flat, v);
      return b.create<ShardSliceOp>(loc, shard, f, sharding).getResult();
    };
    Value p = slice(op.getParam()), g = slice(op.getGrad());
    // The moments become shard-sized states (the plan sizes their buffers from these types).
    b.setInsertionPoint(m);
    Value mShard = b.create<StateOp>(m.getLoc(), shard, m.getNameAttr());
    b.setInsertionPoint(v);
    Value vShard = b.create<StateOp>(v.getLoc(), shard, v.getNameAttr());
    b.setInsertionPoint(op);
    auto update = b.create<AdamWOp>(loc, p, g, mShard, vShard, op.getLr(), op.getStep(), op.getBeta1Attr(),
                                    op.getBeta2Attr(), op.getEpsilonAttr(), op.getWeightDecayAttr());
    Value gathered = b.create<AllGatherOp>(loc, flat, update.getNewParam(), FlatSymbolRefAttr::get(ctx, "mesh"),
                                           b.getStrArrayAttr({"dp"}));
    Value newParam = b.create<ReshapeOp>(loc, type, gathered);
    op.getNewParam().replaceAllUsesWith(newParam);
    op.getNewExpAvg().replaceAllUsesWith(update.getNewExpAvg());
    op.getNewExpAvgSq().replaceAllUsesWith(update.getNewExpAvgSq());
    op.erase();
    if (m->use_empty())
      m.erase();
    if (v->use_empty())
      v.erase();
    return success();
  }
};

} // namespace
