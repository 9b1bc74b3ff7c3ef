// RUN: cpc-opt %s --cpc-zero="stage=2 dp=2 funcs=step" --cpc-data-parallel="size=2 funcs=step" | FileCheck %s

// Tests that ZeRO-2 also splits the gradient's square in the global norm over dp: partitioning
// then reduce-scatters the gradient's partial sum once (no all-reduce of it), the norm term is
// this rank's share, partial over dp, all-reduced once before the sqrt, and the clipped update
// reads the same block.
// CHECK-LABEL: func.func @step
// CHECK-NOT: cpc.all_reduce %{{.*}} : tensor<4x6xf32>
// CHECK: %[[SHARD:.*]] = cpc.reduce_scatter %{{.*}} over @mesh ["dp"] : tensor<4x6xf32> -> tensor<2x6xf32>
// CHECK: %[[SQ:.*]] = cpc.mul %[[SHARD]], %[[SHARD]]
// CHECK: %[[SHARE:.*]] = cpc.reduce_sum %[[SQ]] {{.*}}partial = ["dp"]
// CHECK: %[[TOTAL:.*]] = cpc.all_reduce %[[SHARE]] over @mesh ["dp"] : tensor<f32>
// CHECK: cpc.sqrt %[[TOTAL]]
// CHECK: %[[CLIPPED:.*]] = cpc.mul %[[SHARD]], %{{.*}} : (tensor<2x6xf32>, tensor<f32>) -> tensor<2x6xf32>
// CHECK-NOT: cpc.reduce_scatter
// CHECK: %[[NP:.*]], %{{.*}}, %{{.*}} = cpc.adamw %{{.*}}, %[[CLIPPED]], {{.*}} -> (tensor<2x6xf32>, tensor<2x6xf32>, tensor<2x6xf32>)
// CHECK: cpc.all_gather %[[NP]] over @mesh ["dp"] : tensor<2x6xf32> -> tensor<4x6xf32>
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
