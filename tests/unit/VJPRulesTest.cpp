// Tests that every differentiable op's VJP rule matches central finite differences: each case
// is a tiny loss over trainable f64 parameters, differentiated by cpc-autodiff, lowered to a plan
// and run on the CPU kernels; the analytic gradient is compared with (L(p+h) - L(p-h)) / 2h.
#include "compiler/PlanBuilder.h"
#include "dialects/cpc/CpcDialect.h"
#include "passes/Passes.h"
#include "runtime/Executor.h"
#include "tests/unit/TestWeights.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <random>

namespace {

using TestWeights = cpc::test::DoubleWeights;

using Shape = std::vector<int64_t>;

std::string tensorType(const Shape &shape) {
  std::string t = "tensor<";
  for (int64_t d : shape)
    t += std::to_string(d) + "x";
  return t + "f64>";
}

struct Case {
  std::string name;
  std::map<std::string, Shape> params; // trainable, differentiated
  std::string ops;                     // MLIR computing %y from the parameters
  Shape yShape;
  double low = -1.0, high = 1.0;       // range of the random parameter values
  double tolerance = 1e-6;             // relative to max(1, |grad|)
  double h = 1e-6;                     // finite-difference step
};

/// @main: the parameters, the case's ops, then loss = sum(y * w) with a frozen random w so that
/// every element of y gets its own gradient.
std::string moduleText(const Case &c) {
  std::string yType = tensorType(c.yShape), axes;
  for (size_t d = 0; d < c.yShape.size(); ++d)
    axes += (d ? ", " : "") + std::to_string(d);
  std::string text;
  for (auto &[name, shape] : c.params)
    text += "cpc.variable @" + name + " trainable : " + tensorType(shape) + "\n";
  text += "cpc.variable @w : " + yType + "\n";
  text += "func.func @main() -> (tensor<f64> {cpc.name = \"loss\"}) {\n";
  for (auto &[name, shape] : c.params)
    text += "  %" + name + " = cpc.parameter @" + name + " : " + tensorType(shape) + "\n";
  text += c.ops;
  text += "  %w = cpc.parameter @w : " + yType + "\n";
  text += "  %yw = cpc.mul %y, %w : (" + yType + ", " + yType + ") -> " + yType + "\n";
  text += "  %loss = cpc.reduce_sum %yw {axes = array<i64: " + axes + ">} : " + yType + " -> tensor<f64>\n";
  return text + "  return %loss : tensor<f64>\n}\n";
}

void PrintTo(const Case &c, std::ostream *os) { *os << c.name; }

class VJPRules : public ::testing::TestWithParam<Case> {};

TEST_P(VJPRules, MatchesFiniteDifferences) {
  const Case &c = GetParam();
  mlir::MLIRContext context;
  context.loadDialect<cpc::CpcDialect, mlir::func::FuncDialect>();
  std::string text = moduleText(c);
  auto module = mlir::parseSourceString<mlir::ModuleOp>(text, &context);
  ASSERT_TRUE(module) << text;
  mlir::PassManager pm(&context);
  pm.addPass(cpc::createCpcAutodiff());
  ASSERT_TRUE(mlir::succeeded(pm.run(*module))) << text;

  auto weightStore = std::make_shared<TestWeights>();
  TestWeights &weights = *weightStore;
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> dist(c.low, c.high), wdist(-1.0, 1.0);
  for (auto &[name, shape] : c.params) {
    auto &v = weights.values[name];
    v.resize(cpc::numElements(shape));
    for (double &x : v)
      x = dist(rng);
  }
  auto &w = weights.values["w"];
  w.resize(cpc::numElements(c.yShape));
  for (double &x : w)
    x = wdist(rng);

  cpc::PlanOptions options;
  options.mode = cpc::PlanMode::Train; // parameters get their own, writable memory
  options.functions = {"main", "main_grad"};
  mlir::FailureOr<cpc::Plan> built = cpc::buildPlan(*module, weightStore, "vjp-test", options);
  ASSERT_TRUE(mlir::succeeded(built));
  cpc::Plan plan = std::move(*built);
  cpc::Executor exec(plan, {});
  exec.run("main_grad");
  std::map<std::string, std::vector<double>> grads;
  for (auto &[name, shape] : c.params) {
    cpc::TensorRef g = exec.output("grad." + name);
    grads[name].assign(g.as<double>(), g.as<double>() + g.numel());
  }
  auto loss = [&] {
    exec.run("main");
    return *exec.output("loss", "main").as<double>();
  };
  const double h = c.h;
  for (auto &[name, shape] : c.params) {
    double *p = exec.variable(name).as<double>();
    for (size_t i = 0; i < grads[name].size(); ++i) {
      double saved = p[i];
      p[i] = saved + h;
      double up = loss();
      p[i] = saved - h;
      double down = loss();
      p[i] = saved;
      double numeric = (up - down) / (2 * h);
      EXPECT_NEAR(grads[name][i], numeric, c.tolerance * std::max(1.0, std::abs(numeric)))
          << "d loss / d " << name << "[" << i << "]";
    }
  }
}

/// One-operand elementwise op on x[2x3].
Case unary(const std::string &op, double low = -1.0, double high = 1.0, const std::string &attrs = "") {
  return {op, {{"x", {2, 3}}}, "  %y = cpc." + op + " %x " + attrs + " : tensor<2x3xf64>\n", {2, 3}, low, high};
}

/// Broadcasting binary op: a[2x3] op b[3].
Case binary(const std::string &op, double low = -1.0, double high = 1.0) {
  return {op, {{"a", {2, 3}}, {"b", {3}}},
          "  %y = cpc." + op + " %a, %b : (tensor<2x3xf64>, tensor<3xf64>) -> tensor<2x3xf64>\n", {2, 3}, low, high};
}

const Case kCases[] = {
    unary("neg"), unary("abs"), unary("exp"), unary("log", 0.5, 2.0), unary("sqrt", 0.5, 2.0),
    unary("rsqrt", 0.5, 2.0), unary("reciprocal", 0.5, 2.0), unary("erf"), unary("tanh"), unary("sigmoid"),
    unary("relu"), unary("gelu"), unary("gelu", -1.0, 1.0, "{approximate = #cpc.gelu_approximation<tanh>}"),
    unary("softmax", -1.0, 1.0, "{axis = 1 : i64}"), unary("softmax", -1.0, 1.0, "{axis = 0 : i64}"),
    binary("add"), binary("sub"), binary("mul"), binary("div", 0.5, 2.0), binary("pow", 0.5, 2.0), binary("max"),
    binary("min"),
    {"pow_constant_exponent", {{"x", {2, 3}}},
     "  %two = cpc.constant dense<2.0> : tensor<f64>\n"
     "  %y = cpc.pow %x, %two : (tensor<2x3xf64>, tensor<f64>) -> tensor<2x3xf64>\n", {2, 3}},
    {"matmul_batched_by_matrix", {{"x", {2, 3, 4}}, {"m", {4, 5}}},
     "  %y = cpc.matmul %x, %m : (tensor<2x3x4xf64>, tensor<4x5xf64>) -> tensor<2x3x5xf64>\n", {2, 3, 5}},
    {"matmul_broadcast_batch", {{"x", {2, 1, 3, 4}}, {"m", {3, 4, 2}}},
     "  %y = cpc.matmul %x, %m : (tensor<2x1x3x4xf64>, tensor<3x4x2xf64>) -> tensor<2x3x3x2xf64>\n", {2, 3, 3, 2}},
    {"matmul_transposed_rhs", {{"x", {2, 3, 4}}, {"m", {5, 4}}},
     "  %y = cpc.matmul %x, %m {transpose_rhs = true} : (tensor<2x3x4xf64>, tensor<5x4xf64>) -> tensor<2x3x5xf64>\n",
     {2, 3, 5}},
    {"matmul_transposed_lhs", {{"x", {2, 4, 3}}, {"m", {4, 5}}},
     "  %y = cpc.matmul %x, %m {transpose_lhs = true} : (tensor<2x4x3xf64>, tensor<4x5xf64>) -> tensor<2x3x5xf64>\n",
     {2, 3, 5}},
    {"matmul_both_transposed_batched", {{"x", {2, 4, 3}}, {"m", {2, 5, 4}}},
     "  %y = cpc.matmul %x, %m {transpose_lhs = true, transpose_rhs = true} : "
     "(tensor<2x4x3xf64>, tensor<2x5x4xf64>) -> tensor<2x3x5xf64>\n", {2, 3, 5}},
    {"matmul_vectors", {{"v", {4}}, {"m", {4, 3}}},
     "  %y = cpc.matmul %v, %m : (tensor<4xf64>, tensor<4x3xf64>) -> tensor<3xf64>\n", {3}},
    {"matmul_matrix_vector", {{"m", {3, 4}}, {"v", {4}}},
     "  %y = cpc.matmul %m, %v : (tensor<3x4xf64>, tensor<4xf64>) -> tensor<3xf64>\n", {3}},
    {"attention", {{"q", {2, 3, 4}}, {"k", {2, 5, 4}}, {"v", {2, 5, 6}}},
     "  %y, %p = cpc.attention %q, %k, %v {scale = 0.7 : f64} : (tensor<2x3x4xf64>, tensor<2x5x4xf64>, "
     "tensor<2x5x6xf64>) -> (tensor<2x3x6xf64>, tensor<2x3x5xf64>)\n", {2, 3, 6}, -2.0, 2.0},
    {"attention_heads_negative_scale", {{"q", {1, 2, 4, 3}}, {"k", {1, 2, 4, 3}}, {"v", {1, 2, 4, 3}}},
     "  %y, %p = cpc.attention %q, %k, %v {scale = -1.5 : f64} : (tensor<1x2x4x3xf64>, tensor<1x2x4x3xf64>, "
     "tensor<1x2x4x3xf64>) -> (tensor<1x2x4x3xf64>, tensor<1x2x4x4xf64>)\n", {1, 2, 4, 3}},
    {"reduce_sum", {{"x", {2, 3, 4}}},
     "  %y = cpc.reduce_sum %x {axes = array<i64: 1>} : tensor<2x3x4xf64> -> tensor<2x4xf64>\n", {2, 4}},
    {"reduce_mean_keepdims", {{"x", {2, 3, 4}}},
     "  %y = cpc.reduce_mean %x {axes = array<i64: 0, 2>, keepdims = true} : tensor<2x3x4xf64> -> tensor<1x3x1xf64>\n",
     {1, 3, 1}},
    {"reduce_max", {{"x", {3, 4}}},
     "  %y = cpc.reduce_max %x {axes = array<i64: 1>} : tensor<3x4xf64> -> tensor<3xf64>\n", {3}},
    {"reduce_min", {{"x", {3, 4}}},
     "  %y = cpc.reduce_min %x {axes = array<i64: 0>} : tensor<3x4xf64> -> tensor<4xf64>\n", {4}},
    {"reduce_prod", {{"x", {3, 4}}},
     "  %y = cpc.reduce_prod %x {axes = array<i64: 1>} : tensor<3x4xf64> -> tensor<3xf64>\n", {3}, 0.5, 1.5},
    {"layer_norm", {{"x", {2, 3, 4}}, {"s", {4}}, {"b", {4}}},
     "  %y = cpc.layer_norm %x, %s, %b {axis = 2 : i64, epsilon = 1.0e-5 : f64} : "
     "(tensor<2x3x4xf64>, tensor<4xf64>, tensor<4xf64>) -> tensor<2x3x4xf64>\n", {2, 3, 4}},
    {"layer_norm_two_dims", {{"x", {2, 3, 4}}, {"s", {3, 4}}, {"b", {3, 4}}},
     "  %y = cpc.layer_norm %x, %s, %b {axis = 1 : i64, epsilon = 1.0e-6 : f64} : "
     "(tensor<2x3x4xf64>, tensor<3x4xf64>, tensor<3x4xf64>) -> tensor<2x3x4xf64>\n", {2, 3, 4}},
    {"reshape", {{"x", {2, 6}}},
     "  %y = cpc.reshape %x : tensor<2x6xf64> -> tensor<3x4xf64>\n", {3, 4}},
    {"transpose", {{"x", {2, 3, 4}}},
     "  %y = cpc.transpose %x {permutation = array<i64: 2, 0, 1>} : tensor<2x3x4xf64> -> tensor<4x2x3xf64>\n", {4, 2, 3}},
    {"slice_strided", {{"x", {5, 6}}},
     "  %y = cpc.slice %x {starts = array<i64: 1, 0>, limits = array<i64: 5, 5>, strides = array<i64: 2, 2>} : "
     "tensor<5x6xf64> -> tensor<2x3xf64>\n", {2, 3}},
    {"pad", {{"x", {2, 3}}},
     "  %y = cpc.pad %x {low_padding = array<i64: 1, 0>, high_padding = array<i64: 0, 2>, interior_padding = array<i64: 1, 1>} : "
     "tensor<2x3xf64> -> tensor<4x7xf64>\n", {4, 7}},
    {"concat", {{"a", {2, 1}}, {"b", {2, 3}}},
     "  %y = cpc.concat %a, %b {axis = 1 : i64} : (tensor<2x1xf64>, tensor<2x3xf64>) -> tensor<2x4xf64>\n", {2, 4}},
    {"broadcast", {{"x", {1, 3}}},
     "  %y = cpc.broadcast %x : tensor<1x3xf64> -> tensor<2x4x3xf64>\n", {2, 4, 3}},
    {"gather_repeated_indices", {{"x", {4, 3}}},
     "  %i = cpc.constant dense<[[3, 0], [0, -1]]> : tensor<2x2xi64>\n"
     "  %y = cpc.gather %x, %i {axis = 0 : i64} : (tensor<4x3xf64>, tensor<2x2xi64>) -> tensor<2x2x3xf64>\n",
     {2, 2, 3}},
    {"gather_elements", {{"x", {2, 4}}},
     "  %i = cpc.constant dense<[[3, 1, 1], [0, 2, 3]]> : tensor<2x3xi64>\n"
     "  %y = cpc.gather_elements %x, %i {axis = 1 : i64} : (tensor<2x4xf64>, tensor<2x3xi64>) -> tensor<2x3xf64>\n",
     {2, 3}},
    {"topk_values", {{"x", {2, 5}}},
     "  %v, %i = cpc.topk %x {k = 3 : i64, axis = 1 : i64} : tensor<2x5xf64> -> tensor<2x3xf64>, tensor<2x3xi64>\n"
     "  %y = cpc.mul %v, %v : (tensor<2x3xf64>, tensor<2x3xf64>) -> tensor<2x3xf64>\n", {2, 3}},
    {"where", {{"a", {2, 3}}, {"b", {3}}},
     "  %c = cpc.constant dense<[[true, false, true], [false, false, true]]> : tensor<2x3xi1>\n"
     "  %y = cpc.where %c, %a, %b : (tensor<2x3xi1>, tensor<2x3xf64>, tensor<3xf64>) -> tensor<2x3xf64>\n", {2, 3}},
    {"scatter_nd_data", {{"x", {3, 4}}},
     "  %i = cpc.constant dense<[[1]]> : tensor<1x1xi64>\n"
     "  %u = cpc.constant dense<0.5> : tensor<1x4xf64>\n"
     "  %y = cpc.scatter_nd %x, %i, %u : (tensor<3x4xf64>, tensor<1x1xi64>, tensor<1x4xf64>) -> tensor<3x4xf64>\n",
     {3, 4}},
    {"conv2d", {{"x", {1, 2, 5, 5}}, {"k", {3, 2, 2, 2}}, {"bias", {3}}},
     "  %y = cpc.conv2d %x, %k, %bias {strides = array<i64: 2, 1>, padding = array<i64: 1, 0, 0, 1>, "
     "dilations = array<i64: 1, 2>} : (tensor<1x2x5x5xf64>, tensor<3x2x2x2xf64>, tensor<3xf64>) -> tensor<1x3x3x4xf64>\n",
     {1, 3, 3, 4}},
    {"conv2d_patch_embedding", {{"x", {2, 3, 4, 4}}, {"k", {5, 3, 2, 2}}},
     "  %y = cpc.conv2d %x, %k {strides = array<i64: 2, 2>, padding = array<i64: 0, 0, 0, 0>, "
     "dilations = array<i64: 1, 1>} : (tensor<2x3x4x4xf64>, tensor<5x3x2x2xf64>) -> tensor<2x5x2x2xf64>\n",
     {2, 5, 2, 2}},
    // f64 -> f32 -> exp -> f64, times x: both cast directions carry the gradient of x * exp(x).
    // The f32 exp rounds (~1e-7 relative), so a wider step (truncation ~h^2/6 * 4e = 2e-4) and a
    // looser tolerance than the f64 cases.
    {"cast_f32_round_trip", {{"x", {2, 3}}},
     "  %x32 = cpc.cast %x : tensor<2x3xf64> -> tensor<2x3xf32>\n"
     "  %e32 = cpc.exp %x32 : tensor<2x3xf32>\n"
     "  %e = cpc.cast %e32 : tensor<2x3xf32> -> tensor<2x3xf64>\n"
     "  %y = cpc.mul %e, %x : (tensor<2x3xf64>, tensor<2x3xf64>) -> tensor<2x3xf64>\n", {2, 3}, -1.0, 1.0, 1e-3, 1e-2},
    {"value_used_twice", {{"x", {2, 3}}},
     "  %e = cpc.exp %x : tensor<2x3xf64>\n"
     "  %y = cpc.mul %e, %x : (tensor<2x3xf64>, tensor<2x3xf64>) -> tensor<2x3xf64>\n", {2, 3}},
};

INSTANTIATE_TEST_SUITE_P(AllOps, VJPRules, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case> &info) {
                           std::string n = info.param.name + "_" + std::to_string(info.index);
                           for (char &ch : n)
                             if (!isalnum((unsigned char)ch))
                               ch = '_';
                           return n;
                         });

} // namespace
