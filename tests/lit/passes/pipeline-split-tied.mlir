// RUN: cpc-opt %s --cpc-pipeline-stages='chunks=2 split=fc2' --cpc-autodiff --cpc-build-train-step=separate-apply=true --cpc-pipeline-split='stages=2 chunks=2' | FileCheck %s

// Tests a parameter read by both chunks (a tied weight): each chunk accumulates its own part of
// the gradient every microbatch, and the update sums the parts once per step (chunk 0's part
// goes up once, the new value comes back once). Also tests that a value two programs of rank 1
// need is sent once and handed from its forward to its backward.
// CHECK-LABEL: func.func @forward_0
// CHECK: cpc.send %{{.*}} to @mesh ["pp" = 1] channel 0
// CHECK-NOT: cpc.send
// CHECK-LABEL: func.func @backward_0
// CHECK-NOT: cpc.recv
// CHECK: cpc.assign %{{.*}} to @grad_acc.w.chunk0
// CHECK: func.func @forward_1() -> (tensor<2x4xf32> {cpc.transfer = [[HAND:[0-9]+]] : i64}, tensor<f32> {cpc.name = "loss"})
// CHECK: cpc.recv from @mesh ["pp" = 0] channel 0
// CHECK: func.func @backward_1(%{{.*}}: tensor<2x4xf32> {cpc.transfer = [[HAND]] : i64})
// CHECK-NOT: cpc.send
// CHECK: cpc.assign %{{.*}} to @grad_acc.w.chunk1
// CHECK-LABEL: func.func @apply_0
// CHECK: %[[PART:.*]] = cpc.state @grad_acc.w.chunk0
// CHECK: cpc.send %[[PART]] to @mesh ["pp" = 1]
// CHECK: %[[NEW:.*]] = cpc.recv from @mesh ["pp" = 1]
// CHECK: cpc.assign %[[NEW]] to @w
// CHECK: cpc.assign %{{.*}} to @grad_acc.w.chunk0
// CHECK-LABEL: func.func @apply_1
// CHECK: %[[OTHER:.*]] = cpc.recv from @mesh ["pp" = 0]
// CHECK: %[[MINE:.*]] = cpc.state @grad_acc.w.chunk1
// CHECK: cpc.add %[[OTHER]], %[[MINE]]
// CHECK: cpc.adamw
// CHECK: cpc.send %{{.*}} to @mesh ["pp" = 0]
// CHECK: cpc.assign %{{.*}} to @grad_acc.w.chunk1
cpc.variable @w trainable : tensor<4x4xf32>
func.func @main(%x: tensor<2x4xf32> {cpc.name = "x"}) -> tensor<f32> {
  %w = cpc.parameter @w : tensor<4x4xf32>
  %h = cpc.matmul %x, %w : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32> loc("fc1")
  %a = cpc.tanh %h : tensor<2x4xf32> loc("act")
  %y = cpc.matmul %a, %w : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32> loc("fc2")
  %l = cpc.reduce_mean %y {axes = array<i64: 0, 1>, keepdims = false} : tensor<2x4xf32> -> tensor<f32> loc("loss")
  return %l : tensor<f32>
}
