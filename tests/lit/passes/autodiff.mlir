// RUN: cpc-opt %s --cpc-autodiff | FileCheck %s

// Tests that autodiff treats a cpc.stop_gradient result as a constant: the max that y is shifted
// by gets no gradient (no reduce_max VJP: no mask of the maxima), so dL/dw is x alone.
// CHECK-LABEL: func.func @main_grad
// CHECK-NOT: cpc.equal
// CHECK: %[[DW:.*]] = cpc.mul %{{.*}}, %arg0 : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
// CHECK-NOT: cpc.equal
// CHECK: return %{{.*}}, %[[DW]] : tensor<f32>, tensor<4xf32>
cpc.variable @w trainable : tensor<4xf32>
func.func @main(%x: tensor<4xf32>) -> tensor<f32> {
  %w = cpc.parameter @w : tensor<4xf32>
  %y = cpc.mul %x, %w : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %m = cpc.reduce_max %y {axes = array<i64: 0>, keepdims = true} : tensor<4xf32> -> tensor<1xf32>
  %s = cpc.stop_gradient %m : tensor<1xf32>
  %d = cpc.sub %y, %s : (tensor<4xf32>, tensor<1xf32>) -> tensor<4xf32>
  %l = cpc.reduce_sum %d {axes = array<i64: 0>} : tensor<4xf32> -> tensor<f32>
  return %l : tensor<f32>
}
