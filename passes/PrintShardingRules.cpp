//===- PrintShardingRules.cpp - each op's factor rule, as an attribute ----===//
//
// An inspection pass (as Shardy's rule printing): makes the rules that propagation and
// partitioning read visible to lit tests and to users of cpc-opt, and checks their invariant.
//
#include "passes/Passes.h"

#include "dialects/cpc/CpcDialect.h"

#include "mlir/IR/Builders.h"

namespace cpc {
#define GEN_PASS_DEF_CPCPRINTSHARDINGRULES
#include "passes/Passes.h.inc"
} // namespace cpc

using namespace mlir;
using namespace cpc;

namespace {

struct CpcPrintShardingRulesPass : cpc::impl::CpcPrintShardingRulesBase<CpcPrintShardingRulesPass> {
  void runOnOperation() override {
    Builder b(&getContext());
    WalkResult walk = getOperation().walk([&](Operation *op) {
      std::optional<ShardingRule> rule = getShardingRule(op);
      if (!rule)
        return WalkResult::advance();
      if (std::string problem = checkShardingRule(*rule, op); !problem.empty()) {
        op->emitError("sharding rule ") << rule->describe() << " is inconsistent: " << problem;
        return WalkResult::interrupt();
      }
      op->setAttr("cpc.sharding_rule", b.getStringAttr(rule->describe()));
      return WalkResult::advance();
    });
    if (walk.wasInterrupted())
      signalPassFailure();
  }
};

} // namespace
