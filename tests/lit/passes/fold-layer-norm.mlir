// RUN: cpc-opt %s --pass-pipeline='builtin.module(func.func(cpc-fold-layer-norm))' | FileCheck %s --check-prefixes=CHECK,FOLD

// Tests that the opset-13 torch LayerNorm chain over the last axis (reduce_mean keepdims, sub,
// pow 2, reduce_mean, add eps 1e-6, sqrt, div, mul scale[D], add bias[D]) becomes one
// cpc.layer_norm with epsilon 1e-6 and the scale / bias operands.
// CHECK-LABEL: func.func @torch_chain_affine
// FOLD-SAME: (%[[X:[^:]*]]: tensor<2x197x768xf32>, %[[SCALE:[^:]*]]: tensor<768xf32>, %[[BIAS:[^:]*]]: tensor<768xf32>)
// FOLD-NEXT: %[[LN:.*]] = cpc.layer_norm %[[X]], %[[SCALE]], %[[BIAS]] {axis = 2 : i64, epsilon = 9.99999{{[0-9]*}}E-7 : f64} : (tensor<2x197x768xf32>, tensor<768xf32>, tensor<768xf32>) -> tensor<2x197x768xf32>
// FOLD-NEXT: return %[[LN]] : tensor<2x197x768xf32>
func.func @torch_chain_affine(%x: tensor<2x197x768xf32>, %scale: tensor<768xf32>, %bias: tensor<768xf32>) -> tensor<2x197x768xf32> {
  %two = cpc.constant dense<2.0> : tensor<f32>
  %eps = cpc.constant dense<1.0e-06> : tensor<f32>
  %mean = cpc.reduce_mean %x {axes = array<i64: 2>, keepdims = true} : tensor<2x197x768xf32> -> tensor<2x197x1xf32>
  %d = cpc.sub %x, %mean : (tensor<2x197x768xf32>, tensor<2x197x1xf32>) -> tensor<2x197x768xf32>
  %sq = cpc.pow %d, %two : (tensor<2x197x768xf32>, tensor<f32>) -> tensor<2x197x768xf32>
  %var = cpc.reduce_mean %sq {axes = array<i64: 2>, keepdims = true} : tensor<2x197x768xf32> -> tensor<2x197x1xf32>
  %ve = cpc.add %var, %eps : (tensor<2x197x1xf32>, tensor<f32>) -> tensor<2x197x1xf32>
  %std = cpc.sqrt %ve : tensor<2x197x1xf32>
  %n = cpc.div %d, %std : (tensor<2x197x768xf32>, tensor<2x197x1xf32>) -> tensor<2x197x768xf32>
  %s = cpc.mul %n, %scale : (tensor<2x197x768xf32>, tensor<768xf32>) -> tensor<2x197x768xf32>
  %y = cpc.add %s, %bias : (tensor<2x197x768xf32>, tensor<768xf32>) -> tensor<2x197x768xf32>
  return %y : tensor<2x197x768xf32>
}

// Tests that the chain without the affine tail folds with splat ones / zeros as scale / bias
// (and eps on the left of the add).
// CHECK-LABEL: func.func @no_affine_tail
// FOLD-SAME: (%[[X:[^:]*]]: tensor<4x64xf32>)
// FOLD-DAG: %[[ONES:.*]] = cpc.constant dense<1.000000e+00> : tensor<64xf32>
// FOLD-DAG: %[[ZEROS:.*]] = cpc.constant dense<0.000000e+00> : tensor<64xf32>
// FOLD: %[[LN:.*]] = cpc.layer_norm %[[X]], %[[ONES]], %[[ZEROS]] {axis = 1 : i64, epsilon = 9.99999{{[0-9]*}}E-6 : f64} : (tensor<4x64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<4x64xf32>
// FOLD-NEXT: return %[[LN]] : tensor<4x64xf32>
func.func @no_affine_tail(%x: tensor<4x64xf32>) -> tensor<4x64xf32> {
  %two = cpc.constant dense<2.0> : tensor<f32>
  %eps = cpc.constant dense<1.0e-05> : tensor<f32>
  %mean = cpc.reduce_mean %x {axes = array<i64: 1>, keepdims = true} : tensor<4x64xf32> -> tensor<4x1xf32>
  %d = cpc.sub %x, %mean : (tensor<4x64xf32>, tensor<4x1xf32>) -> tensor<4x64xf32>
  %sq = cpc.pow %d, %two : (tensor<4x64xf32>, tensor<f32>) -> tensor<4x64xf32>
  %var = cpc.reduce_mean %sq {axes = array<i64: 1>, keepdims = true} : tensor<4x64xf32> -> tensor<4x1xf32>
  %ve = cpc.add %eps, %var : (tensor<f32>, tensor<4x1xf32>) -> tensor<4x1xf32>
  %std = cpc.sqrt %ve : tensor<4x1xf32>
  %n = cpc.div %d, %std : (tensor<4x64xf32>, tensor<4x1xf32>) -> tensor<4x64xf32>
  return %n : tensor<4x64xf32>
}

// Tests that squaring by d * d and normalizing over two trailing dims folds with axis 1, with
// the scale absorbed and a zero bias.
// CHECK-LABEL: func.func @mul_square_two_axes
// FOLD-SAME: (%[[X:[^:]*]]: tensor<2x4x8xf32>, %[[SCALE:[^:]*]]: tensor<4x8xf32>)
// FOLD: %[[ZEROS:.*]] = cpc.constant dense<0.000000e+00> : tensor<4x8xf32>
// FOLD: %[[LN:.*]] = cpc.layer_norm %[[X]], %[[SCALE]], %[[ZEROS]] {axis = 1 : i64, epsilon = 9.99999{{[0-9]*}}E-6 : f64} : (tensor<2x4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<2x4x8xf32>
// FOLD-NEXT: return %[[LN]] : tensor<2x4x8xf32>
func.func @mul_square_two_axes(%x: tensor<2x4x8xf32>, %scale: tensor<4x8xf32>) -> tensor<2x4x8xf32> {
  %eps = cpc.constant dense<1.0e-05> : tensor<f32>
  %mean = cpc.reduce_mean %x {axes = array<i64: 1, 2>, keepdims = true} : tensor<2x4x8xf32> -> tensor<2x1x1xf32>
  %d = cpc.sub %x, %mean : (tensor<2x4x8xf32>, tensor<2x1x1xf32>) -> tensor<2x4x8xf32>
  %sq = cpc.mul %d, %d : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %var = cpc.reduce_mean %sq {axes = array<i64: 1, 2>, keepdims = true} : tensor<2x4x8xf32> -> tensor<2x1x1xf32>
  %ve = cpc.add %var, %eps : (tensor<2x1x1xf32>, tensor<f32>) -> tensor<2x1x1xf32>
  %std = cpc.sqrt %ve : tensor<2x1x1xf32>
  %n = cpc.div %d, %std : (tensor<2x4x8xf32>, tensor<2x1x1xf32>) -> tensor<2x4x8xf32>
  %s = cpc.mul %scale, %n : (tensor<4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  return %s : tensor<2x4x8xf32>
}

// Tests that a mean over a non-trailing axis (a BatchNorm-like chain) does NOT fold.
// CHECK-LABEL: func.func @non_trailing_axis
// CHECK-NOT: cpc.layer_norm
// CHECK: cpc.reduce_mean %{{.*}} {axes = array<i64: 1>, keepdims = true} : tensor<2x197x768xf32> -> tensor<2x1x768xf32>
// CHECK: cpc.sqrt
// CHECK: cpc.div
// CHECK-NOT: cpc.layer_norm
// CHECK: return
func.func @non_trailing_axis(%x: tensor<2x197x768xf32>) -> tensor<2x197x768xf32> {
  %two = cpc.constant dense<2.0> : tensor<f32>
  %eps = cpc.constant dense<1.0e-06> : tensor<f32>
  %mean = cpc.reduce_mean %x {axes = array<i64: 1>, keepdims = true} : tensor<2x197x768xf32> -> tensor<2x1x768xf32>
  %d = cpc.sub %x, %mean : (tensor<2x197x768xf32>, tensor<2x1x768xf32>) -> tensor<2x197x768xf32>
  %sq = cpc.pow %d, %two : (tensor<2x197x768xf32>, tensor<f32>) -> tensor<2x197x768xf32>
  %var = cpc.reduce_mean %sq {axes = array<i64: 1>, keepdims = true} : tensor<2x197x768xf32> -> tensor<2x1x768xf32>
  %ve = cpc.add %var, %eps : (tensor<2x1x768xf32>, tensor<f32>) -> tensor<2x1x768xf32>
  %std = cpc.sqrt %ve : tensor<2x1x768xf32>
  %n = cpc.div %d, %std : (tensor<2x197x768xf32>, tensor<2x1x768xf32>) -> tensor<2x197x768xf32>
  return %n : tensor<2x197x768xf32>
}

// Tests that a variance taken over other axes than the mean does NOT fold.
// CHECK-LABEL: func.func @mismatched_variance_axes
// CHECK-NOT: cpc.layer_norm
// CHECK: cpc.div
// CHECK-NOT: cpc.layer_norm
// CHECK: return
func.func @mismatched_variance_axes(%x: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  %two = cpc.constant dense<2.0> : tensor<f32>
  %eps = cpc.constant dense<1.0e-05> : tensor<f32>
  %mean = cpc.reduce_mean %x {axes = array<i64: 2>, keepdims = true} : tensor<2x4x8xf32> -> tensor<2x4x1xf32>
  %d = cpc.sub %x, %mean : (tensor<2x4x8xf32>, tensor<2x4x1xf32>) -> tensor<2x4x8xf32>
  %sq = cpc.pow %d, %two : (tensor<2x4x8xf32>, tensor<f32>) -> tensor<2x4x8xf32>
  %var = cpc.reduce_mean %sq {axes = array<i64: 1, 2>, keepdims = true} : tensor<2x4x8xf32> -> tensor<2x1x1xf32>
  %ve = cpc.add %var, %eps : (tensor<2x1x1xf32>, tensor<f32>) -> tensor<2x1x1xf32>
  %std = cpc.sqrt %ve : tensor<2x1x1xf32>
  %n = cpc.div %d, %std : (tensor<2x4x8xf32>, tensor<2x1x1xf32>) -> tensor<2x4x8xf32>
  return %n : tensor<2x4x8xf32>
}

// Tests that an exponent other than 2 (pow 3) does NOT fold.
// CHECK-LABEL: func.func @wrong_exponent
// CHECK-NOT: cpc.layer_norm
// CHECK: cpc.pow
// CHECK-NOT: cpc.layer_norm
// CHECK: return
func.func @wrong_exponent(%x: tensor<4x64xf32>) -> tensor<4x64xf32> {
  %three = cpc.constant dense<3.0> : tensor<f32>
  %eps = cpc.constant dense<1.0e-05> : tensor<f32>
  %mean = cpc.reduce_mean %x {axes = array<i64: 1>, keepdims = true} : tensor<4x64xf32> -> tensor<4x1xf32>
  %d = cpc.sub %x, %mean : (tensor<4x64xf32>, tensor<4x1xf32>) -> tensor<4x64xf32>
  %sq = cpc.pow %d, %three : (tensor<4x64xf32>, tensor<f32>) -> tensor<4x64xf32>
  %var = cpc.reduce_mean %sq {axes = array<i64: 1>, keepdims = true} : tensor<4x64xf32> -> tensor<4x1xf32>
  %ve = cpc.add %var, %eps : (tensor<4x1xf32>, tensor<f32>) -> tensor<4x1xf32>
  %std = cpc.sqrt %ve : tensor<4x1xf32>
  %n = cpc.div %d, %std : (tensor<4x64xf32>, tensor<4x1xf32>) -> tensor<4x64xf32>
  return %n : tensor<4x64xf32>
}
