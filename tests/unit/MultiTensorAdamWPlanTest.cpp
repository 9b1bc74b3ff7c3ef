// Tests that a plan runs cpc.multi_tensor_adamw as the separate updates run, when one tensor's
// gradient is another tensor's parameter (here grad(a) = b): the plan must not update b in place
// before the step has read it as a's gradient.
#include "compiler/PlanBuilder.h"
#include "dialects/cpc/CpcDialect.h"
#include "runtime/Executor.h"
#include "tests/unit/TestWeights.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

namespace {

constexpr const char *kModule = R"mlir(
cpc.variable @a trainable : tensor<4xf64>
cpc.variable @b trainable : tensor<4xf64>
cpc.variable @m.a state <exp_avg> : tensor<4xf64>
cpc.variable @m.b state <exp_avg> : tensor<4xf64>
cpc.variable @v.a state <exp_avg_sq> : tensor<4xf64>
cpc.variable @v.b state <exp_avg_sq> : tensor<4xf64>
cpc.variable @a2 trainable : tensor<4xf64>
cpc.variable @b2 trainable : tensor<4xf64>
cpc.variable @m.a2 state <exp_avg> : tensor<4xf64>
cpc.variable @m.b2 state <exp_avg> : tensor<4xf64>
cpc.variable @v.a2 state <exp_avg_sq> : tensor<4xf64>
cpc.variable @v.b2 state <exp_avg_sq> : tensor<4xf64>
func.func @grouped() {
  %lr = cpc.constant dense<0.1> : tensor<f64>
  %t = cpc.constant dense<1.0> : tensor<f64>
  %s = cpc.constant dense<1.0> : tensor<f64>
  %a = cpc.parameter @a : tensor<4xf64>
  %b = cpc.parameter @b : tensor<4xf64>
  %ga = cpc.constant dense<[0.5, -1.0, 2.0, 0.25]> : tensor<4xf64>
  %ma = cpc.state @m.a : tensor<4xf64>
  %mb = cpc.state @m.b : tensor<4xf64>
  %va = cpc.state @v.a : tensor<4xf64>
  %vb = cpc.state @v.b : tensor<4xf64>
  %u:6 = cpc.multi_tensor_adamw %lr, %t, %s, [%b, %a, %ga, %b, %mb, %ma, %vb, %va] {beta1 = 0.9 : f64, beta2 = 0.95 : f64, epsilon = 1.0e-8 : f64, weight_decays = array<f64: 0.0, 0.0>} : (tensor<f64>, tensor<f64>, tensor<f64>, tensor<4xf64>, tensor<4xf64>, tensor<4xf64>, tensor<4xf64>, tensor<4xf64>, tensor<4xf64>, tensor<4xf64>, tensor<4xf64>) -> (tensor<4xf64>, tensor<4xf64>, tensor<4xf64>, tensor<4xf64>, tensor<4xf64>, tensor<4xf64>)
  cpc.assign %u#0 to @b : tensor<4xf64>
  cpc.assign %u#1 to @a : tensor<4xf64>
  cpc.assign %u#2 to @m.b : tensor<4xf64>
  cpc.assign %u#3 to @m.a : tensor<4xf64>
  cpc.assign %u#4 to @v.b : tensor<4xf64>
  cpc.assign %u#5 to @v.a : tensor<4xf64>
  return
}
func.func @separate() {
  %lr = cpc.constant dense<0.1> : tensor<f64>
  %t = cpc.constant dense<1.0> : tensor<f64>
  %a = cpc.parameter @a2 : tensor<4xf64>
  %b = cpc.parameter @b2 : tensor<4xf64>
  %ga = cpc.constant dense<[0.5, -1.0, 2.0, 0.25]> : tensor<4xf64>
  %ma = cpc.state @m.a2 : tensor<4xf64>
  %mb = cpc.state @m.b2 : tensor<4xf64>
  %va = cpc.state @v.a2 : tensor<4xf64>
  %vb = cpc.state @v.b2 : tensor<4xf64>
  %nb, %nmb, %nvb = cpc.adamw %b, %ga, %mb, %vb, %lr, %t {beta1 = 0.9 : f64, beta2 = 0.95 : f64, epsilon = 1.0e-8 : f64, weight_decay = 0.0 : f64} : (tensor<4xf64>, tensor<4xf64>, tensor<4xf64>, tensor<4xf64>, tensor<f64>, tensor<f64>) -> (tensor<4xf64>, tensor<4xf64>, tensor<4xf64>)
  %na, %nma, %nva = cpc.adamw %a, %b, %ma, %va, %lr, %t {beta1 = 0.9 : f64, beta2 = 0.95 : f64, epsilon = 1.0e-8 : f64, weight_decay = 0.0 : f64} : (tensor<4xf64>, tensor<4xf64>, tensor<4xf64>, tensor<4xf64>, tensor<f64>, tensor<f64>) -> (tensor<4xf64>, tensor<4xf64>, tensor<4xf64>)
  cpc.assign %nb to @b2 : tensor<4xf64>
  cpc.assign %na to @a2 : tensor<4xf64>
  return
}
)mlir";

TEST(MultiTensorAdamWPlan, AGradientThatIsAnotherParameterIsReadBeforeItsUpdate) {
  mlir::MLIRContext context;
  context.loadDialect<cpc::CpcDialect, mlir::func::FuncDialect>();
  auto module = mlir::parseSourceString<mlir::ModuleOp>(kModule, &context);
  ASSERT_TRUE(module);
  auto weights = std::make_shared<cpc::test::DoubleWeights>();
  for (const char *name : {"a", "a2"})
    weights->values[name] = {1.0, 2.0, 3.0, 4.0};
  for (const char *name : {"b", "b2"})
    weights->values[name] = {-0.5, 0.75, 1.5, -2.0};
  cpc::PlanOptions options;
  options.mode = cpc::PlanMode::Train;
  options.functions = {"grouped", "separate"};
  mlir::FailureOr<cpc::Plan> built = cpc::buildPlan(*module, weights, "multi-tensor-test", options);
  ASSERT_TRUE(mlir::succeeded(built));
  cpc::Plan plan = std::move(*built);
  cpc::Executor exec(plan, {});
  exec.run("grouped");
  exec.run("separate");
  for (auto [grouped, separate] : {std::pair("a", "a2"), std::pair("b", "b2")}) {
    cpc::TensorRef g = exec.variable(grouped), s = exec.variable(separate);
    for (int i = 0; i < 4; ++i)
      EXPECT_EQ(g.as<double>()[i], s.as<double>()[i]) << grouped << "[" << i << "]";
  }
}

} // namespace
