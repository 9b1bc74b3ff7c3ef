// RUN: cpc-opt %s --cpc-pipeline-stages=chunks=2 --cpc-autodiff --cpc-build-train-step='separate-apply=true clip-grad-norm=1.0' --cpc-pipeline-split='stages=2 chunks=2' | FileCheck %s

// Tests that the step becomes a forward and a backward program per chunk and an update per
// pipeline rank, joined by sends right after a value is computed and receives right before it
// is used, over a pp axis added to the mesh.
// CHECK: cpc.mesh @mesh shape = [2] axes = ["pp"]

// Tests chunk 0's forward: its own copy of the input and of w1, and the activation sent on.
// CHECK-LABEL: func.func @forward_0(%{{.*}}: tensor<2x4xf32> {cpc.name = "x"})
// CHECK-SAME: attributes {cpc.phase = #cpc.phase<forward>, cpc.pipeline_chunk = 0 : i64, cpc.pipeline_rank = 0 : i64}
// CHECK: %[[H:.*]] = cpc.matmul
// CHECK-NEXT: cpc.send %[[H]] to @mesh ["pp" = 1] channel 0 : tensor<2x8xf32>

// Tests that the backward of chunk 0 receives the activation gradient and accumulates w1's.
// CHECK-LABEL: func.func @backward_0
// CHECK: %[[G:.*]] = cpc.recv from @mesh ["pp" = 1] channel [[GRAD:[0-9]+]] : tensor<2x8xf32>
// CHECK: cpc.matmul %{{.*}}, %[[G]] {transpose_lhs = true}
// CHECK: cpc.assign %{{.*}} to @grad_acc.w1

// Tests that the last chunk's forward returns the loss and hands the saved tanh output to its
// backward (a result and an argument with the same cpc.transfer channel).
// CHECK: func.func @forward_1() -> (tensor<2x8xf32> {cpc.transfer = [[SAVED:[0-9]+]] : i64}, tensor<f32> {cpc.name = "loss"})
// CHECK: cpc.recv from @mesh ["pp" = 0] channel 0
// CHECK: func.func @backward_1(%{{.*}}: tensor<2x8xf32> {cpc.transfer = [[SAVED]] : i64})
// CHECK: cpc.send %{{.*}} to @mesh ["pp" = 0] channel [[GRAD]] : tensor<2x8xf32>
// CHECK: cpc.assign %{{.*}} to @grad_acc.w2

// Tests the updates: each rank updates the parameters it holds; the global norm's partial sum
// goes up to the last rank, whose clip coefficient comes back down.
// CHECK-LABEL: func.func @apply_0
// CHECK: cpc.state @grad_acc.w1
// CHECK: cpc.send %{{.*}} to @mesh ["pp" = 1] channel [[NORM:[0-9]+]] : tensor<f32>
// CHECK: cpc.recv from @mesh ["pp" = 1] channel [[COEF:[0-9]+]] : tensor<f32>
// CHECK: cpc.adamw
// CHECK: cpc.assign %{{.*}} to @w1
// CHECK-NOT: "w2"
// CHECK-LABEL: func.func @apply_1
// CHECK-SAME: -> (tensor<f32> {cpc.name = "grad_norm"})
// CHECK: cpc.recv from @mesh ["pp" = 0] channel [[NORM]] : tensor<f32>
// CHECK: cpc.sqrt
// CHECK: cpc.send %{{.*}} to @mesh ["pp" = 0] channel [[COEF]] : tensor<f32>
// CHECK: cpc.assign %{{.*}} to @w2
cpc.variable @w1 trainable : tensor<4x8xf32>
cpc.variable @w2 trainable : tensor<8x3xf32>
func.func @main(%x: tensor<2x4xf32> {cpc.name = "x"}) -> tensor<f32> {
  %w1 = cpc.parameter @w1 : tensor<4x8xf32>
  %h = cpc.matmul %x, %w1 : (tensor<2x4xf32>, tensor<4x8xf32>) -> tensor<2x8xf32> loc("fc1")
  %a = cpc.tanh %h : tensor<2x8xf32> loc("act")
  %w2 = cpc.parameter @w2 : tensor<8x3xf32>
  %y = cpc.matmul %a, %w2 : (tensor<2x8xf32>, tensor<8x3xf32>) -> tensor<2x3xf32> loc("fc2")
  %l = cpc.reduce_mean %y {axes = array<i64: 0, 1>, keepdims = false} : tensor<2x3xf32> -> tensor<f32> loc("loss")
  return %l : tensor<f32>
}
