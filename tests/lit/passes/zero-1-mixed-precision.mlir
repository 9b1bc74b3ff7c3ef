// RUN: cpc-opt %s --cpc-zero="stage=1 dp=2 funcs=mixed" --cpc-data-parallel="size=2 funcs=mixed" | FileCheck %s
cpc.mesh @mesh shape = [2] axes = ["dp"]
// Tests ZeRO-1 in mixed precision as DeepSpeed counts it (4Ψ+12Ψ/N): a master weight read only
// through its cast to bf16 is stored split with its moments, cast as a block and the bf16 copy
// gathered; the 16-bit gradient is all-reduced and kept whole in bf16, and widened to f32 only
// on the rows this rank squares for the norm and updates; nothing in f32 is gathered.
// CHECK: cpc.variable @w trainable {global_shape = array<i64: 4, 6>, sharding = #cpc.sharding<@mesh, {{\[\[}}"dp"], []]>} : tensor<2x6xf32>
// CHECK-LABEL: func.func @mixed
// CHECK: %[[B:.*]] = cpc.parameter @w : tensor<2x6xf32>
// CHECK: %[[C:.*]] = cpc.cast %[[B]] {{.*}}: tensor<2x6xf32> -> tensor<2x6xbf16>
// CHECK: cpc.all_gather %[[C]] over @mesh ["dp"] : tensor<2x6xbf16> -> tensor<4x6xbf16>
// CHECK: %[[G16:.*]] = cpc.all_reduce %{{.*}} over @mesh ["dp"] : tensor<4x6xbf16>
// CHECK: %[[ROWS:.*]] = cpc.shard_slice %[[G16]] to <@mesh, {{\[\[}}"dp"], []]> : tensor<4x6xbf16> -> tensor<2x6xbf16>
// CHECK: %[[G:.*]] = cpc.cast %[[ROWS]] {{.*}}: tensor<2x6xbf16> -> tensor<2x6xf32>
// CHECK: cpc.mul %[[G]], %[[G]] {{.*}}: (tensor<2x6xf32>, tensor<2x6xf32>)
// CHECK: cpc.adamw %[[B]], %{{.*}} -> (tensor<2x6xf32>, tensor<2x6xf32>, tensor<2x6xf32>)
// CHECK-NOT: cpc.all_gather
// CHECK: cpc.assign %{{.*}} to @w : tensor<2x6xf32>
cpc.variable @w trainable : tensor<4x6xf32>
cpc.variable @adamw.exp_avg.w state <exp_avg> : tensor<4x6xf32>
cpc.variable @adamw.exp_avg_sq.w state <exp_avg_sq> : tensor<4x6xf32>
func.func @mixed(%x: tensor<4x4xbf16> {cpc.name = "x"}, %lr: tensor<f32> {cpc.name = "lr", cpc.runtime = #cpc.runtime_input<learning_rate>}, %t: tensor<f32> {cpc.name = "step", cpc.runtime = #cpc.runtime_input<step>}) -> (tensor<4x6xbf16>, tensor<f32>) {
  %w = cpc.parameter @w : tensor<4x6xf32>
  %wl = cpc.cast %w : tensor<4x6xf32> -> tensor<4x6xbf16>
  %y = cpc.matmul %x, %wl : (tensor<4x4xbf16>, tensor<4x6xbf16>) -> tensor<4x6xbf16>
  %yl = cpc.matmul %x, %y {transpose_lhs = true} : (tensor<4x4xbf16>, tensor<4x6xbf16>) -> tensor<4x6xbf16>
  %g = cpc.cast %yl : tensor<4x6xbf16> -> tensor<4x6xf32>
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
  return %y, %norm : tensor<4x6xbf16>, tensor<f32>
}
