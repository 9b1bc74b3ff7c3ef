// RUN: cpc-opt %s --pass-pipeline='builtin.module(func.func(cpc-expand-layer-norm))' | FileCheck %s

// Tests that a layer norm over the last dim becomes its two statistics, each a reduce_mean over
// the normalized dims (partial sums once the hidden dim is split over columns), then the
// elementwise rest with the scale and bias.
// CHECK-LABEL: func.func @norm
// CHECK-SAME: (%[[X:[^:]*]]: tensor<2x3x8xf32>, %[[S:[^:]*]]: tensor<8xf32>, %[[B:[^:]*]]: tensor<8xf32>)
// CHECK-NOT: cpc.layer_norm
// CHECK: %[[MEAN:.*]] = cpc.reduce_mean %[[X]] {axes = array<i64: 2>, keepdims = true} : tensor<2x3x8xf32> -> tensor<2x3x1xf32>
// CHECK: %[[D:.*]] = cpc.sub %[[X]], %[[MEAN]]
// CHECK: %[[SQ:.*]] = cpc.mul %[[D]], %[[D]]
// CHECK: %[[VAR:.*]] = cpc.reduce_mean %[[SQ]] {axes = array<i64: 2>, keepdims = true}
// CHECK: %[[EPS:.*]] = cpc.constant dense<9.99999997E-7> : tensor<f32>
// CHECK: %[[INV:.*]] = cpc.rsqrt
// CHECK: %[[N:.*]] = cpc.mul %[[D]], %[[INV]]
// CHECK: %[[SC:.*]] = cpc.mul %[[N]], %[[S]]
// CHECK: %[[Y:.*]] = cpc.add %[[SC]], %[[B]]
// CHECK: return %[[Y]]
func.func @norm(%x: tensor<2x3x8xf32>, %s: tensor<8xf32>, %b: tensor<8xf32>) -> tensor<2x3x8xf32> {
  %y = cpc.layer_norm %x, %s, %b {axis = 2 : i64, epsilon = 1.0e-06 : f64} : (tensor<2x3x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x3x8xf32>
  return %y : tensor<2x3x8xf32>
}
