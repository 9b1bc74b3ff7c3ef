// RUN: cpc-opt %s --cpc-recompute=mode=full | FileCheck %s

// Tests that a Dropout mask, drawn from no input data and outside every segment, belongs to the
// segment that first reads it: the backward's read of the mask is served by a second draw (the
// same numbers: counter-based) and the compare and select on it, copied right before that read,
// so the forward's mask dies with the forward. The tanh the backward also reads runs again.
// CHECK: module attributes {cpc.recomputed = {flops = {{[0-9]+}} : i64, ops = 4 : i64}}
// CHECK: %[[R:.*]] = cpc.random_uniform {high = 1.000000e+00 : f64, low = 0.000000e+00 : f64, seed = 7 : i64}
// CHECK: cpc.mul %arg1,
// CHECK-NEXT: cpc.tanh %arg0
// CHECK-NEXT: %[[R2:.*]] = cpc.random_uniform {high = 1.000000e+00 : f64, low = 0.000000e+00 : f64, seed = 7 : i64}
// CHECK-NEXT: %[[M2:.*]] = cpc.greater_equal %[[R2]],
// CHECK-NEXT: %[[S2:.*]] = cpc.where %[[M2]],
// CHECK-NEXT: cpc.mul %{{.*}}, %[[S2]] :
cpc.variable @w trainable : tensor<4x8xf32>
func.func @train_step(%x: tensor<4x8xf32>, %g: tensor<4x8xf32>) -> tensor<4x8xf32> attributes {cpc.phase = #cpc.phase<train_step>} {
  %zero = cpc.constant dense<0.000000e+00> : tensor<f32>
  %scale = cpc.constant dense<1.11111116> : tensor<f32>
  %p = cpc.constant dense<1.000000e-01> : tensor<f32>
  %h = cpc.tanh %x {cpc.recompute_segment = 0 : i64} : tensor<4x8xf32>
  %r = cpc.random_uniform {high = 1.000000e+00 : f64, low = 0.000000e+00 : f64, seed = 7 : i64} : tensor<4x8xf32>
  %m = cpc.greater_equal %r, %p : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xi1>
  %s = cpc.where %m, %scale, %zero : (tensor<4x8xi1>, tensor<f32>, tensor<f32>) -> tensor<4x8xf32>
  %d = cpc.mul %h, %s {cpc.recompute_segment = 0 : i64} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %z = cpc.tanh %d {cpc.recompute_segment = 1 : i64} : tensor<4x8xf32>
  %b1 = cpc.mul %g, %z {cpc.backward} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %b2 = cpc.mul %b1, %s : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %b3 = cpc.mul %b2, %h : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %b3 : tensor<4x8xf32>
}
