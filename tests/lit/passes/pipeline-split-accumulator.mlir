// RUN: cpc-opt %s --cpc-pipeline-split='stages=2 chunks=2' | FileCheck %s

// Tests that a collective over a gradient accumulator's old value (which reads no forward
// value) runs in the backward program that adds to it, not in the forward: handed over from a
// forward that ran before the earlier microbatches' backward, it would read a stale sum.
// CHECK-LABEL: func.func @forward_0
// CHECK-NOT: cpc.reduce_scatter
// CHECK-LABEL: func.func @backward_0
// CHECK: %[[OLD:.*]] = cpc.state @grad_acc.w
// CHECK: cpc.reduce_scatter %[[OLD]] over @mesh ["dp"]
// CHECK: cpc.assign %{{.*}} to @grad_acc.w
cpc.mesh @mesh shape = [2] axes = ["dp"]
cpc.variable @w trainable : tensor<4x4xf32>
cpc.variable @grad_acc.w state <gradient_accumulator> : tensor<4x4xf32>
func.func @accumulate(%x: tensor<2x4xf32> {cpc.name = "x"}) -> (tensor<f32> {cpc.name = "loss"}) attributes {cpc.phase = #cpc.phase<accumulate>} {
  %w = cpc.parameter @w : tensor<4x4xf32>
  %h = cpc.matmul %x, %w {cpc.stage = 0 : i64} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %b = cpc.tanh %h {cpc.stage = 1 : i64} : tensor<2x4xf32>
  %l = cpc.reduce_mean %b {axes = array<i64: 0, 1>, cpc.stage = 1 : i64} : tensor<2x4xf32> -> tensor<f32>
  %g = cpc.matmul %x, %h {cpc.stage = 0 : i64, cpc.backward, transpose_lhs = true} : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<4x4xf32>
  %gs = cpc.slice %g {cpc.stage = 0 : i64, cpc.backward, starts = array<i64: 0, 0>, limits = array<i64: 2, 4>, strides = array<i64: 1, 1>} : tensor<4x4xf32> -> tensor<2x4xf32>
  %acc = cpc.state @grad_acc.w : tensor<4x4xf32>
  %old = cpc.reduce_scatter %acc over @mesh ["dp"] : tensor<4x4xf32> -> tensor<2x4xf32>
  %new = cpc.add %gs, %old {cpc.stage = 0 : i64, cpc.backward} : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  %full = cpc.all_gather %new over @mesh ["dp"] : tensor<2x4xf32> -> tensor<4x4xf32>
  cpc.assign %full to @grad_acc.w : tensor<4x4xf32>
  return %l : tensor<f32>
}
func.func @apply(%lr: tensor<f32> {cpc.name = "lr"}) -> (tensor<f32> {cpc.name = "grad_norm"}) attributes {cpc.phase = #cpc.phase<apply>} {
  %r = cpc.state @grad_acc.w : tensor<4x4xf32>
  %n = cpc.reduce_sum %r {axes = array<i64: 0, 1>} : tensor<4x4xf32> -> tensor<f32>
  return %n : tensor<f32>
}
