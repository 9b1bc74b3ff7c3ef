//===- PlanBuilderDiagnosticsTest.cpp - IR a plan cannot hold, reported at its op ===//
//
// The plan builder reports what it cannot lower as a diagnostic at the op (issue 30, item 3):
// these tests build plans from small modules and check the diagnostic's words and location.
//
#include "compiler/PlanBuilder.h"
#include "dialects/cpc/CpcDialect.h"
#include "tests/unit/TestWeights.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

namespace {

/// The diagnostics of building a plan of `functions` from `text`, as "location: message" lines
/// (locations are the ops' names); "" when the plan builds.
std::string planDiagnostics(const char *text, std::vector<std::string> functions,
                            std::shared_ptr<cpc::test::DoubleWeights> weights) {
  mlir::MLIRContext context;
  context.loadDialect<cpc::CpcDialect, mlir::func::FuncDialect>();
  auto module = mlir::parseSourceString<mlir::ModuleOp>(text, &context);
  EXPECT_TRUE(module);
  if (!module)
    return "unparsed";
  std::string diagnostics;
  mlir::ScopedDiagnosticHandler handler(&context, [&](mlir::Diagnostic &diag) {
    std::string where;
    if (auto name = llvm::dyn_cast<mlir::NameLoc>(diag.getLocation()))
      where = name.getName().str();
    diagnostics += where + ": " + diag.str() + "\n";
    return mlir::success();
  });
  cpc::PlanOptions options;
  options.mode = cpc::PlanMode::Train;
  options.functions = std::move(functions);
  mlir::FailureOr<cpc::Plan> plan = cpc::buildPlan(*module, weights, "diagnostics-test", options);
  EXPECT_EQ(mlir::failed(plan), !diagnostics.empty()) << diagnostics;
  return diagnostics;
}

std::shared_ptr<cpc::test::DoubleWeights> weightsOfW() {
  auto weights = std::make_shared<cpc::test::DoubleWeights>();
  weights->values["w"] = {1.0, 2.0, 3.0, 4.0};
  return weights;
}

// Tests that a value read from a variable and used after an assign overwrote it is refused at the
// op that uses it (the plan keeps one buffer per variable), and that the same function with the
// use first builds.
TEST(PlanBuilderDiagnostics, AReadUsedAfterItsVariableIsAssignedIsRefusedAtTheUse) {
  const char *late = R"mlir(
cpc.variable @w trainable : tensor<4xf64>
func.func @step(%x: tensor<4xf64>) -> tensor<4xf64> {
  %w = cpc.parameter @w : tensor<4xf64>
  cpc.assign %x to @w : tensor<4xf64>
  %y = cpc.add %w, %x : (tensor<4xf64>, tensor<4xf64>) -> tensor<4xf64> loc("late_add")
  return %y : tensor<4xf64>
}
)mlir";
  EXPECT_EQ(planDiagnostics(late, {"step"}, weightsOfW()),
            "late_add: reads @w as it was before the assign at step 0: a plan keeps one buffer per variable, so "
            "reads come first\n");
  const char *early = R"mlir(
cpc.variable @w trainable : tensor<4xf64>
func.func @step(%x: tensor<4xf64>) -> tensor<4xf64> {
  %w = cpc.parameter @w : tensor<4xf64>
  %y = cpc.add %w, %x : (tensor<4xf64>, tensor<4xf64>) -> tensor<4xf64>
  cpc.assign %x to @w : tensor<4xf64>
  return %y : tensor<4xf64>
}
)mlir";
  EXPECT_EQ(planDiagnostics(early, {"step"}, weightsOfW()), "");
}

// Tests that a parameter without a value in the model, or with a value of another size, is
// refused at the variable, naming it.
TEST(PlanBuilderDiagnostics, AParameterTheModelLacksIsRefusedAtItsVariable) {
  const char *text = R"mlir(
cpc.variable @w trainable : tensor<4xf64> loc("w")
cpc.variable @v trainable : tensor<2xf64> loc("v")
func.func @step(%x: tensor<4xf64>) -> tensor<4xf64> {
  %w = cpc.parameter @w : tensor<4xf64>
  %v = cpc.parameter @v : tensor<2xf64>
  %y = cpc.add %w, %x : (tensor<4xf64>, tensor<4xf64>) -> tensor<4xf64>
  return %y : tensor<4xf64>
}
)mlir";
  EXPECT_EQ(planDiagnostics(text, {"step"}, weightsOfW()), "v: the model has no initial value for parameter 'v'\n");
  auto wrongSize = weightsOfW();
  wrongSize->values["v"] = {1.0, 2.0, 3.0};
  EXPECT_EQ(planDiagnostics(text, {"step"}, wrongSize),
            "v: the model's value of parameter 'v' holds 24 bytes, its type needs 16\n");
}

} // namespace
