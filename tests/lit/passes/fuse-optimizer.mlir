// RUN: cpc-opt %s --pass-pipeline='builtin.module(func.func(cpc-fuse-optimizer))' --split-input-file | FileCheck %s

// Tests the update of a clipped step: the norm's term reduce_sum(g * g) becomes one
// reduce_sum_squares of g, and AdamW reads g with the clip coefficient as its grad_scale.
// CHECK-LABEL: func.func @clipped_update
// CHECK-SAME: (%[[G:.*]]: tensor<4x6xf32>, %[[W:.*]]: tensor<4x6xf32>, %{{.*}}: tensor<4x6xf32>, %{{.*}}: tensor<4x6xf32>, %[[LR:.*]]: tensor<f32>, %[[T:.*]]: tensor<f32>)
// CHECK-NOT: cpc.mul
// CHECK: %[[SQ:.*]] = cpc.reduce_sum_squares %[[G]] {axes = array<i64: 0, 1>} : tensor<4x6xf32> -> tensor<f32>
// CHECK: %[[COEF:.*]] = cpc.min
// CHECK-NOT: cpc.mul
// CHECK: cpc.adamw %[[W]], %[[G]], %{{.*}}, %{{.*}}, %[[LR]], %[[T]] grad_scale %[[COEF]] {beta1
func.func @clipped_update(%g: tensor<4x6xf32>, %w: tensor<4x6xf32>, %m: tensor<4x6xf32>, %v: tensor<4x6xf32>,
                          %lr: tensor<f32>, %t: tensor<f32>) -> (tensor<4x6xf32>, tensor<f32>) {
  %sq = cpc.mul %g, %g : (tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<4x6xf32>
  %total = cpc.reduce_sum %sq {axes = array<i64: 0, 1>} : tensor<4x6xf32> -> tensor<f32>
  %norm = cpc.sqrt %total : tensor<f32>
  %one = cpc.constant dense<1.0> : tensor<f32>
  %c = cpc.div %one, %norm : (tensor<f32>, tensor<f32>) -> tensor<f32>
  %coef = cpc.min %c, %one : (tensor<f32>, tensor<f32>) -> tensor<f32>
  %clipped = cpc.mul %g, %coef : (tensor<4x6xf32>, tensor<f32>) -> tensor<4x6xf32>
  %nw, %nm, %nv = cpc.adamw %w, %clipped, %m, %v, %lr, %t {beta1 = 0.9 : f64, beta2 = 0.95 : f64, epsilon = 1.0e-8 : f64, weight_decay = 0.05 : f64} : (tensor<4x6xf32>, tensor<4x6xf32>, tensor<4x6xf32>, tensor<4x6xf32>, tensor<f32>, tensor<f32>) -> (tensor<4x6xf32>, tensor<4x6xf32>, tensor<4x6xf32>)
  return %nw, %norm : tensor<4x6xf32>, tensor<f32>
}

// -----

// Tests what stays: a square read twice, a product of two tensors, a scaled gradient that
// something else reads too, and the scale on the left.
// CHECK-LABEL: func.func @kept
// CHECK: %[[SQ:.*]] = cpc.mul %arg0, %arg0
// CHECK: cpc.reduce_sum %[[SQ]]
// CHECK: %[[P:.*]] = cpc.mul %arg0, %arg1
// CHECK: cpc.reduce_sum %[[P]]
// CHECK: %[[S:.*]] = cpc.mul %arg0, %arg6
// CHECK: cpc.adamw %arg2, %[[S]], %arg3, %arg4, %arg5, %arg5 {
// CHECK: cpc.adamw %arg2, %arg0, %arg3, %arg4, %arg5, %arg5 grad_scale %arg6 {
func.func @kept(%x: tensor<8xf32>, %y: tensor<8xf32>, %w: tensor<8xf32>, %m: tensor<8xf32>, %v: tensor<8xf32>,
                %t: tensor<f32>, %s: tensor<f32>) -> (tensor<f32>, tensor<8xf32>, tensor<f32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) {
  %sq = cpc.mul %x, %x : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %a = cpc.reduce_sum %sq {axes = array<i64: 0>} : tensor<8xf32> -> tensor<f32>
  %p = cpc.mul %x, %y : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %b = cpc.reduce_sum %p {axes = array<i64: 0>} : tensor<8xf32> -> tensor<f32>
  %scaled = cpc.mul %x, %s : (tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
  %nw, %nm, %nv = cpc.adamw %w, %scaled, %m, %v, %t, %t {beta1 = 0.9 : f64, beta2 = 0.95 : f64, epsilon = 1.0e-8 : f64, weight_decay = 0.0 : f64} : (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<f32>, tensor<f32>) -> (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>)
  %left = cpc.mul %s, %x : (tensor<f32>, tensor<8xf32>) -> tensor<8xf32>
  %nw2, %nm2, %nv2 = cpc.adamw %w, %left, %m, %v, %t, %t {beta1 = 0.9 : f64, beta2 = 0.95 : f64, epsilon = 1.0e-8 : f64, weight_decay = 0.0 : f64} : (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<f32>, tensor<f32>) -> (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>)
  return %a, %sq, %b, %nw, %scaled, %nw2 : tensor<f32>, tensor<8xf32>, tensor<f32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>
}

// -----

// Tests that an integer sum of squares keeps its ops (the fused op is for floats).
// CHECK-LABEL: func.func @integers
// CHECK: cpc.mul
// CHECK: cpc.reduce_sum
// CHECK-NOT: cpc.reduce_sum_squares
func.func @integers(%x: tensor<8xi64>) -> tensor<i64> {
  %sq = cpc.mul %x, %x : (tensor<8xi64>, tensor<8xi64>) -> tensor<8xi64>
  %s = cpc.reduce_sum %sq {axes = array<i64: 0>} : tensor<8xi64> -> tensor<i64>
  return %s : tensor<i64>
}
