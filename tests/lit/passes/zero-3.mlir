// RUN: cpc-opt %s --cpc-zero="stage=3 funcs=step" --split-input-file | FileCheck %s

// Tests that ZeRO-3 stores the parameter as this rank's block of its flattened value: the
// update reads and assigns the block (no all-gather after it), and each op that reads the
// parameter gets its own all-gather right before it, so the whole value is never kept from the
// forward to the backward use.
// CHECK-LABEL: func.func @step
// CHECK: %[[B1:.*]] = cpc.parameter "w" trainable {{{.*}}global_shape = array<i64: 4, 3>, sharding = #cpc.sharding<@mesh, {{\[}}["dp"]]>} : tensor<6xf32>
// CHECK: %[[G1:.*]] = cpc.all_gather %[[B1]] over @mesh ["dp"] : tensor<6xf32> -> tensor<12xf32>
// CHECK: %[[W1:.*]] = cpc.reshape %[[G1]] : tensor<12xf32> -> tensor<4x3xf32>
// CHECK: %[[Y:.*]] = cpc.matmul %{{.*}}, %[[W1]]
// CHECK: %[[G2:.*]] = cpc.all_gather %[[B1]] over @mesh ["dp"] : tensor<6xf32> -> tensor<12xf32>
// CHECK: %[[W2:.*]] = cpc.reshape %[[G2]] : tensor<12xf32> -> tensor<4x3xf32>
// CHECK: cpc.matmul %[[Y]], %[[W2]] {transpose_rhs = true}
// CHECK: %[[SHARD:.*]] = cpc.reduce_scatter %{{.*}} over @mesh ["dp"] : tensor<12xf32> -> tensor<6xf32>
// CHECK: %[[BLOCK:.*]] = cpc.parameter "w" trainable {{{.*}}global_shape = array<i64: 4, 3>, {{.*}}} : tensor<6xf32>
// CHECK: %[[NP:.*]], %{{.*}}, %{{.*}} = cpc.adamw %[[BLOCK]], %[[SHARD]], {{.*}} -> (tensor<6xf32>, tensor<6xf32>, tensor<6xf32>)
// CHECK-NOT: cpc.all_gather
// CHECK: cpc.assign %[[NP]] to "w" : tensor<6xf32>
cpc.mesh @mesh shape = [2] axes = ["dp"]
func.func @step(%x: tensor<2x4xf32>, %lr: tensor<f32>, %t: tensor<f32>) -> (tensor<2x4xf32>, tensor<f32>) {
  %w = cpc.parameter "w" trainable : tensor<4x3xf32>
  %y = cpc.matmul %x, %w : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  %dx = cpc.matmul %y, %w {transpose_rhs = true} : (tensor<2x3xf32>, tensor<4x3xf32>) -> tensor<2x4xf32>
  %gp = cpc.matmul %x, %y {transpose_lhs = true} : (tensor<2x4xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>
  %g = cpc.all_reduce %gp over @mesh ["dp"] : tensor<4x3xf32>
  %sq = cpc.mul %g, %g : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
  %s = cpc.reduce_sum %sq {axes = array<i64: 0, 1>} : tensor<4x3xf32> -> tensor<f32>
  %norm = cpc.sqrt %s : tensor<f32>
  %w2 = cpc.parameter "w" trainable : tensor<4x3xf32>
  %m = cpc.state <exp_avg> "adamw.exp_avg.w" : tensor<4x3xf32>
  %v = cpc.state <exp_avg_sq> "adamw.exp_avg_sq.w" : tensor<4x3xf32>
  %nw, %nm, %nv = cpc.adamw %w2, %g, %m, %v, %lr, %t {beta1 = 0.9 : f64, beta2 = 0.95 : f64, epsilon = 1.0e-8 : f64, weight_decay = 0.05 : f64} : (tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>, tensor<f32>, tensor<f32>) -> (tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>)
  cpc.assign %nw to "w" : tensor<4x3xf32>
  cpc.assign %nm to "adamw.exp_avg.w" : tensor<4x3xf32>
  cpc.assign %nv to "adamw.exp_avg_sq.w" : tensor<4x3xf32>
  return %dx, %norm : tensor<2x4xf32>, tensor<f32>
}

// -----

// Tests that a parameter whose size does not divide by the ranks stays whole under ZeRO-3
// (the "unsharded buffers" of the ZeRO formulas): no block, no all-gather.
// CHECK-LABEL: func.func @step
// CHECK: cpc.parameter "b" trainable : tensor<3xf32>
// CHECK-NOT: cpc.all_gather
// CHECK: cpc.assign %{{.*}} to "b" : tensor<3xf32>
cpc.mesh @mesh shape = [2] axes = ["dp"]
func.func @step(%x: tensor<3xf32>, %lr: tensor<f32>, %t: tensor<f32>) -> tensor<3xf32> {
  %b = cpc.parameter "b" trainable : tensor<3xf32>
  %y = cpc.add %x, %b : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  %g = cpc.all_reduce %x over @mesh ["dp"] : tensor<3xf32>
  %m = cpc.state <exp_avg> "adamw.exp_avg.b" : tensor<3xf32>
  %v = cpc.state <exp_avg_sq> "adamw.exp_avg_sq.b" : tensor<3xf32>
  %nb, %nm, %nv = cpc.adamw %b, %g, %m, %v, %lr, %t {beta1 = 0.9 : f64, beta2 = 0.95 : f64, epsilon = 1.0e-8 : f64, weight_decay = 0.0 : f64} : (tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<f32>, tensor<f32>) -> (tensor<3xf32>, tensor<3xf32>, tensor<3xf32>)
  cpc.assign %nb to "b" : tensor<3xf32>
  cpc.assign %nm to "adamw.exp_avg.b" : tensor<3xf32>
  cpc.assign %nv to "adamw.exp_avg_sq.b" : tensor<3xf32>
  return %y : tensor<3xf32>
}
