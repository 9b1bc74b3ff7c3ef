// RUN: cpc-opt %s --cpc-autodiff | FileCheck %s

// Tests that autodiff differentiates cpc.attention by its VJP rule: one cpc.attention_grad that
// reads the forward's probabilities, whose q and k gradients are the parameters' and whose v
// gradient (an input's) is unused.
// CHECK-LABEL: func.func @main_grad
// CHECK: %[[O:.*]], %[[P:.*]] = cpc.attention %[[Q:[^,]*]], %[[K:[^,]*]], %[[X:[^ ]*]] {scale = 5.000000e-01 : f64}
// CHECK: %[[DQ:.*]], %[[DK:.*]], %{{.*}} = cpc.attention_grad %[[Q]], %[[K]], %[[X]], %[[P]], %{{.*}} {scale = 5.000000e-01 : f64}
// CHECK: return %{{.*}}, %[[DQ]], %[[DK]]
cpc.variable @q trainable : tensor<2x3x4xf32>
cpc.variable @k trainable : tensor<2x3x4xf32>
func.func @main(%x: tensor<2x3x4xf32>) -> (tensor<f32> {cpc.name = "loss"}) {
  %q = cpc.parameter @q : tensor<2x3x4xf32>
  %k = cpc.parameter @k : tensor<2x3x4xf32>
  %o, %p = cpc.attention %q, %k, %x {scale = 5.000000e-01 : f64} : (tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> (tensor<2x3x4xf32>, tensor<2x3x3xf32>)
  %l = cpc.reduce_sum %o {axes = array<i64: 0, 1, 2>} : tensor<2x3x4xf32> -> tensor<f32>
  return %l : tensor<f32>
}
