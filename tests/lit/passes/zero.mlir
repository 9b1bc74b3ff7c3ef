// RUN: cpc-opt %s --cpc-zero="stage=1 funcs=step" | FileCheck %s

// Tests that ZeRO-1 makes the AdamW of a parameter whose size divides by the dp ranks work on this
// rank's block of the flattened parameter and gradient, with moments of the block's size, and
// all-gathers the updated blocks back into the parameter; an indivisible parameter keeps its
// whole optimizer.
// CHECK-LABEL: func.func @step
// CHECK: %[[P:.*]] = cpc.reshape %{{.*}} : tensor<4x3xf32> -> tensor<12xf32>
// CHECK: %[[PS:.*]] = cpc.shard_slice %[[P]] to <@mesh, {{\[\[}}"dp"]]> : tensor<12xf32> -> tensor<6xf32>
// CHECK: %[[GS:.*]] = cpc.shard_slice %{{.*}} to <@mesh, {{\[\[}}"dp"]]> : tensor<12xf32> -> tensor<6xf32>
// CHECK: %[[NP:.*]], %[[NM:.*]], %[[NV:.*]] = cpc.adamw %[[PS]], %[[GS]], {{.*}} -> (tensor<6xf32>, tensor<6xf32>, tensor<6xf32>)
// CHECK: %[[ALL:.*]] = cpc.all_gather %[[NP]] over @mesh ["dp"] : tensor<6xf32> -> tensor<12xf32>
// CHECK: %[[W:.*]] = cpc.reshape %[[ALL]] : tensor<12xf32> -> tensor<4x3xf32>
// CHECK: cpc.assign %[[W]] to "w"
// CHECK: cpc.assign %[[NM]] to "adamw.exp_avg.w" : tensor<6xf32>
// CHECK: cpc.adamw {{.*}} -> (tensor<3xf32>, tensor<3xf32>, tensor<3xf32>)
cpc.mesh @mesh shape = [2] axes = ["dp"]
func.func @step(%g: tensor<4x3xf32>, %h: tensor<3xf32>, %lr: tensor<f32>, %t: tensor<f32>) {
  %w = cpc.parameter "w" trainable : tensor<4x3xf32>
  %m = cpc.state <exp_avg> "adamw.exp_avg.w" : tensor<4x3xf32>
  %v = cpc.state <exp_avg_sq> "adamw.exp_avg_sq.w" : tensor<4x3xf32>
  %nw, %nm, %nv = cpc.adamw %w, %g, %m, %v, %lr, %t {beta1 = 0.9 : f64, beta2 = 0.95 : f64, epsilon = 1.0e-8 : f64, weight_decay = 0.05 : f64} : (tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>, tensor<f32>, tensor<f32>) -> (tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>)
  cpc.assign %nw to "w" : tensor<4x3xf32>
  cpc.assign %nm to "adamw.exp_avg.w" : tensor<4x3xf32>
  cpc.assign %nv to "adamw.exp_avg_sq.w" : tensor<4x3xf32>
  %b = cpc.parameter "b" trainable : tensor<3xf32>
  %bm = cpc.state <exp_avg> "adamw.exp_avg.b" : tensor<3xf32>
  %bv = cpc.state <exp_avg_sq> "adamw.exp_avg_sq.b" : tensor<3xf32>
  %nb, %nbm, %nbv = cpc.adamw %b, %h, %bm, %bv, %lr, %t {beta1 = 0.9 : f64, beta2 = 0.95 : f64, epsilon = 1.0e-8 : f64, weight_decay = 0.0 : f64} : (tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<f32>, tensor<f32>) -> (tensor<3xf32>, tensor<3xf32>, tensor<3xf32>)
  cpc.assign %nb to "b" : tensor<3xf32>
  return
}
