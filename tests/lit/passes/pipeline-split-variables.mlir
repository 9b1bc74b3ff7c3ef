// RUN: cpc-opt %s --cpc-pipeline-split='stages=2 chunks=2' | FileCheck %s

// Tests where variables live when the step writes what it does not read: "last_loss" is
// written in the last chunk's forward, so the update reads it there (rank 1), not a zero copy
// on rank 0; assigns of constants that nothing reads still happen (on chunk 0 / rank 0).
// CHECK-LABEL: func.func @forward_0
// CHECK: cpc.send
// CHECK: cpc.assign %{{.*}} to @never_read
// CHECK-LABEL: func.func @forward_1
// CHECK: cpc.assign %{{.*}} to @last_loss
// CHECK-LABEL: func.func @apply_0
// CHECK: %[[SUM:.*]] = cpc.reduce_sum
// CHECK-NEXT: cpc.send %[[SUM]] to @mesh ["pp" = 1]
// CHECK: cpc.assign %{{.*}} to @also_never_read
// CHECK-LABEL: func.func @apply_1
// CHECK: cpc.recv from @mesh ["pp" = 0]
// CHECK: cpc.state @last_loss
// CHECK: cpc.add
cpc.variable @w trainable : tensor<4x4xf32>
cpc.variable @last_loss state <gradient_accumulator> : tensor<f32>
cpc.variable @never_read : tensor<f32>
cpc.variable @also_never_read : tensor<f32>
func.func @accumulate(%x: tensor<2x4xf32> {cpc.name = "x"}) -> (tensor<f32> {cpc.name = "loss"}) attributes {cpc.phase = #cpc.phase<accumulate>} {
  %w = cpc.parameter @w : tensor<4x4xf32>
  %h = cpc.matmul %x, %w {cpc.stage = 0 : i64} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %b = cpc.tanh %h {cpc.stage = 1 : i64} : tensor<2x4xf32>
  %l = cpc.reduce_mean %b {axes = array<i64: 0, 1>, cpc.stage = 1 : i64} : tensor<2x4xf32> -> tensor<f32>
  cpc.assign %l to @last_loss : tensor<f32>
  %c = cpc.constant dense<1.0> : tensor<f32>
  cpc.assign %c to @never_read : tensor<f32>
  return %l : tensor<f32>
}
func.func @apply(%lr: tensor<f32> {cpc.name = "lr"}) -> (tensor<f32> {cpc.name = "grad_norm"}) attributes {cpc.phase = #cpc.phase<apply>} {
  %w = cpc.parameter @w : tensor<4x4xf32>
  %n = cpc.reduce_sum %w {axes = array<i64: 0, 1>} : tensor<4x4xf32> -> tensor<f32>
  %r = cpc.state @last_loss : tensor<f32>
  %o = cpc.add %n, %r : (tensor<f32>, tensor<f32>) -> tensor<f32>
  %c = cpc.constant dense<2.0> : tensor<f32>
  cpc.assign %c to @also_never_read : tensor<f32>
  return %o : tensor<f32>
}

