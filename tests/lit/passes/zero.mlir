// RUN: cpc-opt %s --split-input-file --cpc-zero="stage=1 dp=2 funcs=step" | FileCheck %s --check-prefix=SEED
// RUN: cpc-opt %s --split-input-file --cpc-zero="stage=1 dp=2 funcs=step" --cpc-data-parallel="size=2 funcs=step" | FileCheck %s

// Tests that ZeRO-1 only seeds shardings: the update's results split over dp on dim 0 (after
// every tensor-parallel seed), the gradient kept whole from where backward makes it by a
// cpc.shard that every reader reads through, and the norm's square split as the update.
// SEED: cpc.mesh @mesh shape = [2] axes = ["dp"]
// SEED-LABEL: func.func @step
// SEED: %[[G:.*]] = cpc.matmul %arg0, %{{.*}} {transpose_lhs = true}
// SEED: %[[WHOLE:.*]] = cpc.shard %[[G]] to <@mesh, {{\[\[}}], []], priority = 8>
// SEED: cpc.mul %[[WHOLE]], %[[WHOLE]] {cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}"dp"], []], priority = 8>]}
// SEED: %[[GC:.*]] = cpc.mul %[[WHOLE]], %{{.*}} : (tensor<4x6xf32>, tensor<f32>)
// SEED: cpc.adamw %{{.*}}, %[[GC]], {{.*}}cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}"dp"], []], priority = 8>,
// Tests that partitioning then gives the ZeRO-1 program: the gradient all-reduced whole, each
// rank squaring its rows for the norm (one all-reduce of the shares), this rank's rows of the
// parameter and gradient updated with moments of that size, and the updated rows all-gathered
// into the parameter.
// CHECK: cpc.variable @adamw.exp_avg.w state <exp_avg> {global_shape = array<i64: 4, 6>, sharding = #cpc.sharding<@mesh, {{\[\[}}"dp"], []]>} : tensor<2x6xf32>
// CHECK-LABEL: func.func @step
// CHECK: %[[G:.*]] = cpc.all_reduce %{{.*}} over @mesh ["dp"] : tensor<4x6xf32>
// CHECK: %[[ROWS:.*]] = cpc.shard_slice %[[G]] to <@mesh, {{\[\[}}"dp"], []]> : tensor<4x6xf32> -> tensor<2x6xf32>
// CHECK: %[[SQ:.*]] = cpc.mul %[[ROWS]], %[[ROWS]] {{.*}}: (tensor<2x6xf32>, tensor<2x6xf32>)
// CHECK: %[[SHARE:.*]] = cpc.reduce_sum %[[SQ]] {{.*}}partial = ["dp"]
// CHECK: cpc.all_reduce %[[SHARE]] over @mesh ["dp"] : tensor<f32>
// CHECK: %[[M:.*]] = cpc.state @adamw.exp_avg.w : tensor<2x6xf32>
// CHECK: %[[PS:.*]] = cpc.shard_slice %{{.*}} to <@mesh, {{\[\[}}"dp"], []]> : tensor<4x6xf32> -> tensor<2x6xf32>
// CHECK: %[[NP:.*]], %{{.*}}, %{{.*}} = cpc.adamw %[[PS]], %{{.*}}, %[[M]]
// CHECK: %[[ALL:.*]] = cpc.all_gather %[[NP]] over @mesh ["dp"] : tensor<2x6xf32> -> tensor<4x6xf32>
// CHECK: cpc.assign %[[ALL]] to @w : tensor<4x6xf32>
// CHECK: cpc.assign %{{.*}} to @adamw.exp_avg.w : tensor<2x6xf32>
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

// -----

// Tests that a parameter with no dim that divides by dp keeps its whole optimizer.
// SEED-LABEL: func.func @step
// SEED-NOT: cpc.shardings
// CHECK-LABEL: func.func @step
// CHECK-NOT: cpc.shard_slice
// CHECK: cpc.adamw {{.*}} -> (tensor<3xf32>, tensor<3xf32>, tensor<3xf32>)
cpc.variable @b trainable : tensor<3xf32>
cpc.variable @adamw.exp_avg.b state <exp_avg> : tensor<3xf32>
cpc.variable @adamw.exp_avg_sq.b state <exp_avg_sq> : tensor<3xf32>
func.func @step(%g: tensor<3xf32>, %lr: tensor<f32> {cpc.name = "lr", cpc.runtime = #cpc.runtime_input<learning_rate>}, %t: tensor<f32> {cpc.name = "step", cpc.runtime = #cpc.runtime_input<step>}) {
  %b = cpc.parameter @b : tensor<3xf32>
  %m = cpc.state @adamw.exp_avg.b : tensor<3xf32>
  %v = cpc.state @adamw.exp_avg_sq.b : tensor<3xf32>
  %nb, %nm, %nv = cpc.adamw %b, %g, %m, %v, %lr, %t {beta1 = 0.9 : f64, beta2 = 0.95 : f64, epsilon = 1.0e-8 : f64, weight_decay = 0.0 : f64} : (tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<f32>, tensor<f32>) -> (tensor<3xf32>, tensor<3xf32>, tensor<3xf32>)
  cpc.assign %nb to @b : tensor<3xf32>
  cpc.assign %nm to @adamw.exp_avg.b : tensor<3xf32>
  cpc.assign %nv to @adamw.exp_avg_sq.b : tensor<3xf32>
  return
}

// -----

// Tests that ZeRO composes with tensor parallelism: a parameter split over tp along dim 0 is
// split over dp along dim 1, the first dim tp left whole.
// SEED-LABEL: func.func @step
// SEED: cpc.adamw {{.*}}cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}"tp"], ["dp"]], priority = 8>,
// CHECK: cpc.variable @adamw.exp_avg.w state <exp_avg> {global_shape = array<i64: 4, 6>, sharding = #cpc.sharding<@mesh, {{\[\[}}"tp"], ["dp"]]>} : tensor<2x3xf32>
// CHECK-LABEL: func.func @step
// CHECK: cpc.state @adamw.exp_avg.w : tensor<2x3xf32>
// CHECK: %[[NP:.*]], %{{.*}}, %{{.*}} = cpc.adamw {{.*}} -> (tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>)
// CHECK: cpc.all_gather %[[NP]] over @mesh ["dp"] {dim = 1 : i64} : tensor<2x3xf32> -> tensor<2x6xf32>
cpc.mesh @mesh shape = [2, 2] axes = ["dp", "tp"]
cpc.variable @w trainable : tensor<4x6xf32>
cpc.variable @adamw.exp_avg.w state <exp_avg> : tensor<4x6xf32>
cpc.variable @adamw.exp_avg_sq.w state <exp_avg_sq> : tensor<4x6xf32>
func.func @step(%lr: tensor<f32> {cpc.name = "lr", cpc.runtime = #cpc.runtime_input<learning_rate>}, %t: tensor<f32> {cpc.name = "step", cpc.runtime = #cpc.runtime_input<step>}) {
  %w = cpc.parameter @w {cpc.shardings = [#cpc.sharding<@mesh, [["tp"], []], priority = 1>]} : tensor<4x6xf32>
  %g = cpc.mul %w, %w : (tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<4x6xf32>
  %m = cpc.state @adamw.exp_avg.w : tensor<4x6xf32>
  %v = cpc.state @adamw.exp_avg_sq.w : tensor<4x6xf32>
  %nw, %nm, %nv = cpc.adamw %w, %g, %m, %v, %lr, %t {beta1 = 0.9 : f64, beta2 = 0.95 : f64, epsilon = 1.0e-8 : f64, weight_decay = 0.0 : f64} : (tensor<4x6xf32>, tensor<4x6xf32>, tensor<4x6xf32>, tensor<4x6xf32>, tensor<f32>, tensor<f32>) -> (tensor<4x6xf32>, tensor<4x6xf32>, tensor<4x6xf32>)
  cpc.assign %nw to @w : tensor<4x6xf32>
  cpc.assign %nm to @adamw.exp_avg.w : tensor<4x6xf32>
  cpc.assign %nv to @adamw.exp_avg_sq.w : tensor<4x6xf32>
  return
}
