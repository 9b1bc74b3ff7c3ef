// RUN: cpc-opt %s --split-input-file --cpc-data-parallel="size=2 funcs=step" | FileCheck %s
// RUN: cpc-opt %s --split-input-file --pass-pipeline='builtin.module(cpc-data-parallel{size=2 funcs=step},func.func(cpc-bucket-all-reduce))' | FileCheck %s --check-prefix=BUCKET

// Tests that splitting the batch of x over dp makes every batch-shaped value local, slices a
// whole constant that meets split values, turns a mean over the split batch into a scaled
// partial sum, and all-reduces the weight gradient (a matmul contracting the split batch)
// before the non-linear update, and the loss at the return.
// CHECK: cpc.mesh @mesh shape = [2] axes = ["dp"]
// CHECK-LABEL: func.func @step
// CHECK-SAME: %[[X:.*]]: tensor<2x3xf32> {cpc.name = "x", cpc.sharding = #cpc.sharding<@mesh, {{\[\[}}"dp"], []]>}
// CHECK-SAME: %{{.*}}: tensor<f32> {cpc.runtime = #cpc.runtime_input<learning_rate>}) -> tensor<f32>
// CHECK: %[[Y:.*]] = cpc.matmul %[[X]], %{{[^ ]*}} {cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}"dp"], []]>]} : (tensor<2x3xf32>, tensor<3x2xf32>) -> tensor<2x2xf32>
// CHECK: %[[MEAN:.*]] = cpc.reduce_mean %[[Y]] {axes = array<i64: 0, 1>, cpc.shardings = [#cpc.sharding<@mesh, [], partial = ["dp"]>]} : tensor<2x2xf32> -> tensor<f32>
// CHECK: %[[HALF:.*]] = cpc.mul %[[MEAN]], %{{.*}} : (tensor<f32>, tensor<f32>) -> tensor<f32>
// CHECK: %[[LOSS:.*]] = cpc.all_reduce %[[HALF]] over @mesh ["dp"] : tensor<f32>
// CHECK: %[[G:.*]] = cpc.shard_slice %{{.*}} to <@mesh, {{\[\[}}"dp"], []]> : tensor<4x2xf32> -> tensor<2x2xf32>
// CHECK: %[[DW:.*]] = cpc.matmul %[[X]], %[[G]] {cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}], []], partial = ["dp"]>], transpose_lhs = true} : (tensor<2x3xf32>, tensor<2x2xf32>) -> tensor<3x2xf32>
// CHECK: %[[SUM:.*]] = cpc.all_reduce %[[DW]] over @mesh ["dp"] : tensor<3x2xf32>
// CHECK: cpc.sub %{{.*}}, %[[SUM]] : (tensor<3x2xf32>, tensor<3x2xf32>) -> tensor<3x2xf32>
// CHECK: return %[[LOSS]] : tensor<f32>

// Tests that with buckets the loss and weight-gradient reductions become one collective, issued
// before the first use of either.
// BUCKET-LABEL: func.func @step
// BUCKET: %[[B:.*]]:2 = cpc.all_reduce %{{.*}}, %{{.*}} over @mesh ["dp"] : tensor<f32>, tensor<3x2xf32>
// BUCKET-NEXT: cpc.sub %{{.*}}, %[[B]]#1
// BUCKET: return %[[B]]#0 : tensor<f32>
cpc.variable @w trainable : tensor<3x2xf32>
func.func @step(%x: tensor<4x3xf32> {cpc.name = "x"}, %lr: tensor<f32> {cpc.runtime = #cpc.runtime_input<learning_rate>}) -> tensor<f32> {
  %w = cpc.parameter @w : tensor<3x2xf32>
  %y = cpc.matmul %x, %w : (tensor<4x3xf32>, tensor<3x2xf32>) -> tensor<4x2xf32>
  %loss = cpc.reduce_mean %y {axes = array<i64: 0, 1>} : tensor<4x2xf32> -> tensor<f32>
  %g = cpc.constant dense<0.125> : tensor<4x2xf32>
  %dw = cpc.matmul %x, %g {transpose_lhs = true} : (tensor<4x3xf32>, tensor<4x2xf32>) -> tensor<3x2xf32>
  %nw = cpc.sub %w, %dw : (tensor<3x2xf32>, tensor<3x2xf32>) -> tensor<3x2xf32>
  cpc.assign %nw to @w : tensor<3x2xf32>
  return %loss : tensor<f32>
}

// -----

// BUCKET-LABEL: func.func @step

// Tests that a layer_norm gradient splits along the batch and its scale/bias gradients (sums
// over the batch) are partial, all-reduced once before the update, while dx stays split.
// CHECK-LABEL: func.func @step
// CHECK: %[[DX:.*]], %[[DS:.*]], %[[DB:.*]] = cpc.layer_norm_grad {{.*}}partial = ["dp"]>{{.*}} : (tensor<2x5x8xf32>, tensor<8xf32>, tensor<2x5x8xf32>) -> (tensor<2x5x8xf32>, tensor<8xf32>, tensor<8xf32>)
// CHECK-DAG: cpc.all_reduce %[[DS]] over @mesh ["dp"] : tensor<8xf32>
// CHECK-DAG: cpc.all_reduce %[[DB]] over @mesh ["dp"] : tensor<8xf32>
// CHECK-NOT: cpc.all_reduce %[[DX]]
cpc.variable @s trainable : tensor<8xf32>
cpc.variable @b trainable : tensor<8xf32>
func.func @step(%x: tensor<4x5x8xf32> {cpc.name = "x"}, %g: tensor<4x5x8xf32> {cpc.name = "g"}) -> tensor<4x5x8xf32> {
  %s = cpc.parameter @s : tensor<8xf32>
  %b = cpc.parameter @b : tensor<8xf32>
  %dx, %ds, %db = cpc.layer_norm_grad %x, %s, %g {axis = 2 : i64, epsilon = 1.0e-6 : f64} : (tensor<4x5x8xf32>, tensor<8xf32>, tensor<4x5x8xf32>) -> (tensor<4x5x8xf32>, tensor<8xf32>, tensor<8xf32>)
  %ns = cpc.sub %s, %ds : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %nb = cpc.sub %b, %db : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  cpc.assign %ns to @s : tensor<8xf32>
  cpc.assign %nb to @b : tensor<8xf32>
  return %dx : tensor<4x5x8xf32>
}
