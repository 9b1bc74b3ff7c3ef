// RUN: cpc-opt %s --cpc-zero="stage=2 funcs=step" | FileCheck %s

// Tests that ZeRO-2 replaces the all-reduce of a gradient by a reduce-scatter of the flattened
// partial sum: the (clipped) update works on this rank's block, the squared-norm term becomes this
// rank's share, and the norm's total is all-reduced once before the sqrt.
// CHECK-LABEL: func.func @step
// CHECK-NOT: cpc.all_reduce %{{.*}} : tensor<4x3xf32>
// CHECK: %[[FLAT:.*]] = cpc.reshape %{{.*}} : tensor<4x3xf32> -> tensor<12xf32>
// CHECK: %[[SHARD:.*]] = cpc.reduce_scatter %[[FLAT]] over @mesh ["dp"] : tensor<12xf32> -> tensor<6xf32>
// CHECK: %[[SQ:.*]] = cpc.mul %[[SHARD]], %[[SHARD]] : (tensor<6xf32>, tensor<6xf32>) -> tensor<6xf32>
// CHECK: %[[SHARE:.*]] = cpc.reduce_sum %[[SQ]] {axes = array<i64: 0>} : tensor<6xf32> -> tensor<f32>
// CHECK: %[[TOTAL:.*]] = cpc.all_reduce %[[SHARE]] over @mesh ["dp"] : tensor<f32>
// CHECK: cpc.sqrt %[[TOTAL]]
// CHECK: %[[CLIPPED:.*]] = cpc.mul %[[SHARD]], %{{.*}} : (tensor<6xf32>, tensor<f32>) -> tensor<6xf32>
// CHECK: %[[NP:.*]], %{{.*}}, %{{.*}} = cpc.adamw %{{.*}}, %[[CLIPPED]], {{.*}} -> (tensor<6xf32>, tensor<6xf32>, tensor<6xf32>)
// CHECK: cpc.all_gather %[[NP]] over @mesh ["dp"] : tensor<6xf32> -> tensor<12xf32>
cpc.mesh @mesh shape = [2] axes = ["dp"]
func.func @step(%x: tensor<4x3xf32>, %lr: tensor<f32>, %t: tensor<f32>) -> tensor<f32> {
  %w = cpc.parameter "w" trainable : tensor<4x3xf32>
  %m = cpc.state <exp_avg> "adamw.exp_avg.w" : tensor<4x3xf32>
  %v = cpc.state <exp_avg_sq> "adamw.exp_avg_sq.w" : tensor<4x3xf32>
  %g = cpc.all_reduce %x over @mesh ["dp"] : tensor<4x3xf32>
  %sq = cpc.mul %g, %g : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
  %s = cpc.reduce_sum %sq {axes = array<i64: 0, 1>} : tensor<4x3xf32> -> tensor<f32>
  %norm = cpc.sqrt %s : tensor<f32>
  %c = cpc.constant dense<0.5> : tensor<f32>
  %gc = cpc.mul %g, %c : (tensor<4x3xf32>, tensor<f32>) -> tensor<4x3xf32>
  %nw, %nm, %nv = cpc.adamw %w, %gc, %m, %v, %lr, %t {beta1 = 0.9 : f64, beta2 = 0.95 : f64, epsilon = 1.0e-8 : f64, weight_decay = 0.05 : f64} : (tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>, tensor<f32>, tensor<f32>) -> (tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>)
  cpc.assign %nw to "w" : tensor<4x3xf32>
  cpc.assign %nm to "adamw.exp_avg.w" : tensor<4x3xf32>
  cpc.assign %nv to "adamw.exp_avg_sq.w" : tensor<4x3xf32>
  return %norm : tensor<f32>
}
