// RUN: cpc-opt %s --cpc-zero="stage=3 dp=2 funcs=step" | FileCheck %s --check-prefix=SEED
// RUN: cpc-opt %s --cpc-zero="stage=3 dp=2 funcs=step" --cpc-data-parallel="size=2 funcs=step" | FileCheck %s

// Tests that ZeRO-3 stores the parameter split over dp and reads it through a cpc.shard of its
// tensor-parallel layout (here whole) right before each op that uses it; the update reads the
// stored layout directly.
// SEED: %[[W:.*]] = cpc.parameter @w {cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}"dp"], []]>]}
// SEED: %[[R1:.*]] = cpc.shard %[[W]] to <@mesh, {{\[\[}}], []]>
// SEED: cpc.matmul %arg0, %[[R1]]
// SEED: %[[R2:.*]] = cpc.shard %[[W]] to <@mesh, {{\[\[}}], []]>
// SEED: cpc.matmul %{{.*}}, %[[R2]] {transpose_rhs = true}
// SEED: cpc.adamw %[[W]],
// Tests that partitioning then stores this rank's rows, gathers them right before each reader
// (forward and backward gather separately, so the whole value never lives from one to the
// other), and the update writes its block back with no all-gather.
// CHECK: cpc.variable @w trainable {global_shape = array<i64: 4, 6>, sharding = #cpc.sharding<@mesh, {{\[\[}}"dp"], []]>} : tensor<2x6xf32>
// CHECK-LABEL: func.func @step
// CHECK: %[[B:.*]] = cpc.parameter @w : tensor<2x6xf32>
// CHECK: %[[G1:.*]] = cpc.all_gather %[[B]] over @mesh ["dp"] : tensor<2x6xf32> -> tensor<4x6xf32>
// CHECK: %[[Y:.*]] = cpc.matmul %arg0, %[[G1]]
// CHECK: %[[G2:.*]] = cpc.all_gather %[[B]] over @mesh ["dp"] : tensor<2x6xf32> -> tensor<4x6xf32>
// CHECK: cpc.matmul %[[Y]], %[[G2]] {{.*}}transpose_rhs = true
// CHECK: %[[SHARD:.*]] = cpc.reduce_scatter %{{.*}} over @mesh ["dp"] : tensor<4x6xf32> -> tensor<2x6xf32>
// CHECK: %[[NP:.*]], %{{.*}}, %{{.*}} = cpc.adamw %[[B]], {{.*}} -> (tensor<2x6xf32>, tensor<2x6xf32>, tensor<2x6xf32>)
// CHECK-NOT: cpc.all_gather
// CHECK: cpc.assign %[[NP]] to @w : tensor<2x6xf32>
cpc.variable @w trainable : tensor<4x6xf32>
cpc.variable @adamw.exp_avg.w state <exp_avg> : tensor<4x6xf32>
cpc.variable @adamw.exp_avg_sq.w state <exp_avg_sq> : tensor<4x6xf32>
func.func @step(%x: tensor<4x4xf32> {cpc.name = "x"}, %lr: tensor<f32> {cpc.name = "lr", cpc.runtime = #cpc.runtime_input<learning_rate>}, %t: tensor<f32> {cpc.name = "step", cpc.runtime = #cpc.runtime_input<step>}) -> (tensor<4x4xf32>, tensor<f32>) {
  %w = cpc.parameter @w : tensor<4x6xf32>
  %y = cpc.matmul %x, %w : (tensor<4x4xf32>, tensor<4x6xf32>) -> tensor<4x6xf32>
  %dx = cpc.matmul %y, %w {transpose_rhs = true} : (tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<4x4xf32>
  %g = cpc.matmul %x, %y {transpose_lhs = true} : (tensor<4x4xf32>, tensor<4x6xf32>) -> tensor<4x6xf32>
  %sq = cpc.mul %g, %g : (tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<4x6xf32>
  %s = cpc.reduce_sum %sq {axes = array<i64: 0, 1>} : tensor<4x6xf32> -> tensor<f32>
  %norm = cpc.sqrt %s : tensor<f32>
  %c = cpc.constant dense<0.5> : tensor<f32>
  %gc = cpc.mul %g, %c : (tensor<4x6xf32>, tensor<f32>) -> tensor<4x6xf32>
  %m = cpc.state @adamw.exp_avg.w : tensor<4x6xf32>
  %v = cpc.state @adamw.exp_avg_sq.w : tensor<4x6xf32>
  %nw, %nm, %nv = cpc.adamw %w, %gc, %m, %v, %lr, %t {beta1 = 0.9 : f64, beta2 = 0.95 : f64, epsilon = 1.0e-8 : f64, weight_decay = 0.05 : f64} : (tensor<4x6xf32>, tensor<4x6xf32>, tensor<4x6xf32>, tensor<4x6xf32>, tensor<f32>, tensor<f32>) -> (tensor<4x6xf32>, tensor<4x6xf32>, tensor<4x6xf32>)
  cpc.assign %nw to @w : tensor<4x6xf32>
  cpc.assign %nm to @adamw.exp_avg.w : tensor<4x6xf32>
  cpc.assign %nv to @adamw.exp_avg_sq.w : tensor<4x6xf32>
  return %dx, %norm : tensor<4x4xf32>, tensor<f32>
}
