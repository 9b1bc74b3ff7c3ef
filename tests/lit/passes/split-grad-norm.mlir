// RUN: cpc-opt %s --cpc-split-grad-norm="dp=2 funcs=step" | FileCheck %s --check-prefix=SEED
// RUN: cpc-opt %s --cpc-split-grad-norm="dp=2 funcs=step" --cpc-data-parallel="size=2 funcs=step" | FileCheck %s

// Tests that without ZeRO the norm's square reads the gradient through a cpc.shard of its whole
// layout and is split over dp as ZeRO would split the update (dim 0), the update unseeded.
// SEED: cpc.mesh @mesh shape = [2] axes = ["dp"]
// SEED-LABEL: func.func @step
// SEED: %[[G:.*]] = cpc.matmul %arg0, %{{.*}} {transpose_lhs = true}
// SEED: %[[WHOLE:.*]] = cpc.shard %[[G]] to <@mesh, {{\[\[}}], []], priority = 8>
// SEED: cpc.mul %[[WHOLE]], %[[WHOLE]] {cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}"dp"], []], priority = 8>]}
// SEED: cpc.adamw
// SEED-NOT: cpc.shardings
// SEED-SAME: -> (tensor<4x6xf32>, tensor<4x6xf32>, tensor<4x6xf32>)
// Tests that partitioning then all-reduces the gradient whole, each rank squares its rows and
// one all-reduce sums the shares, while the update and its moments stay whole.
// CHECK: cpc.variable @adamw.exp_avg.w state <exp_avg> : tensor<4x6xf32>
// CHECK-LABEL: func.func @step
// CHECK: %[[G:.*]] = cpc.all_reduce %{{.*}} over @mesh ["dp"] : tensor<4x6xf32>
// CHECK: %[[ROWS:.*]] = cpc.shard_slice %[[G]] to <@mesh, {{\[\[}}"dp"], []]> : tensor<4x6xf32> -> tensor<2x6xf32>
// CHECK: %[[SQ:.*]] = cpc.mul %[[ROWS]], %[[ROWS]]
// CHECK: %[[SHARE:.*]] = cpc.reduce_sum %[[SQ]] {{.*}}partial = ["dp"]
// CHECK: cpc.all_reduce %[[SHARE]] over @mesh ["dp"] : tensor<f32>
// CHECK: %[[GC:.*]] = cpc.mul %[[G]], %{{.*}} : (tensor<4x6xf32>, tensor<f32>) -> tensor<4x6xf32>
// CHECK-NOT: cpc.shard_slice
// CHECK: cpc.adamw %{{.*}}, %[[GC]], {{.*}} -> (tensor<4x6xf32>, tensor<4x6xf32>, tensor<4x6xf32>)
// CHECK-NOT: cpc.all_gather
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
