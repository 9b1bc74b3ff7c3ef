// RUN: cpc-opt %s --cpc-zero="stage=3 dp=2 funcs=mixed" --cpc-data-parallel="size=2 funcs=mixed" | FileCheck %s --check-prefix=MIXED
cpc.mesh @mesh shape = [2] axes = ["dp"]
// Tests that a parameter read through a cast to bf16 (mixed precision) is cast as a block and
// the bf16 copy gathered (half the bytes), and that fp16's skip on overflow (a where feeding the
// parameter's assign) reads the stored block like the update, with no gather.
// MIXED: cpc.variable @w trainable {global_shape = array<i64: 4, 6>, sharding = #cpc.sharding<@mesh, {{\[\[}}"dp"], []]>} : tensor<2x6xf32>
// MIXED-LABEL: func.func @mixed
// MIXED: %[[B:.*]] = cpc.parameter @w : tensor<2x6xf32>
// MIXED: %[[C:.*]] = cpc.cast %[[B]] {{.*}}: tensor<2x6xf32> -> tensor<2x6xbf16>
// MIXED: cpc.all_gather %[[C]] over @mesh ["dp"] : tensor<2x6xbf16> -> tensor<4x6xbf16>
// MIXED: %[[NP:.*]], %{{.*}}, %{{.*}} = cpc.adamw %[[B]]
// MIXED-NOT: cpc.all_gather
// MIXED: %[[KEPT:.*]] = cpc.where %{{.*}}, %[[NP]], %[[B]] {{.*}}-> tensor<2x6xf32>
// MIXED: cpc.assign %[[KEPT]] to @w : tensor<2x6xf32>
cpc.variable @w trainable : tensor<4x6xf32>
cpc.variable @adamw.exp_avg.w state <exp_avg> : tensor<4x6xf32>
cpc.variable @adamw.exp_avg_sq.w state <exp_avg_sq> : tensor<4x6xf32>
func.func @mixed(%x: tensor<4x4xbf16> {cpc.name = "x"}, %ok: tensor<i1> {cpc.name = "ok"}, %lr: tensor<f32> {cpc.name = "lr", cpc.runtime = #cpc.runtime_input<learning_rate>}, %t: tensor<f32> {cpc.name = "step", cpc.runtime = #cpc.runtime_input<step>}) -> tensor<4x6xbf16> {
  %w = cpc.parameter @w : tensor<4x6xf32>
  %wl = cpc.cast %w : tensor<4x6xf32> -> tensor<4x6xbf16>
  %y = cpc.matmul %x, %wl : (tensor<4x4xbf16>, tensor<4x6xbf16>) -> tensor<4x6xbf16>
  %yl = cpc.matmul %x, %y {transpose_lhs = true} : (tensor<4x4xbf16>, tensor<4x6xbf16>) -> tensor<4x6xbf16>
  %g = cpc.cast %yl : tensor<4x6xbf16> -> tensor<4x6xf32>
  %m = cpc.state @adamw.exp_avg.w : tensor<4x6xf32>
  %v = cpc.state @adamw.exp_avg_sq.w : tensor<4x6xf32>
  %nw, %nm, %nv = cpc.adamw %w, %g, %m, %v, %lr, %t {beta1 = 0.9 : f64, beta2 = 0.95 : f64, epsilon = 1.0e-8 : f64, weight_decay = 0.05 : f64} : (tensor<4x6xf32>, tensor<4x6xf32>, tensor<4x6xf32>, tensor<4x6xf32>, tensor<f32>, tensor<f32>) -> (tensor<4x6xf32>, tensor<4x6xf32>, tensor<4x6xf32>)
  %kw = cpc.where %ok, %nw, %w : (tensor<i1>, tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<4x6xf32>
  cpc.assign %kw to @w : tensor<4x6xf32>
  cpc.assign %nm to @adamw.exp_avg.w : tensor<4x6xf32>
  cpc.assign %nv to @adamw.exp_avg_sq.w : tensor<4x6xf32>
  return %y : tensor<4x6xbf16>
}
