// RUN: cpc-opt %s --cpc-inference-program --cpc-pipeline-stages=chunks=2 --cpc-pipeline-split='stages=2 chunks=2' | FileCheck %s

// Tests that an inference program is cut into one forward program per chunk, and nothing else:
// no backward, no update. Each output leaves from the chunk that computes it, however the
// model orders its results: the mask-like `h` from chunk 0, the loss from chunk 1.
// CHECK: cpc.mesh @mesh shape = [2] axes = ["pp"]
// CHECK-LABEL: func.func @forward_0(%{{.*}}: tensor<2x4xf32> {cpc.name = "x"}) -> (tensor<2x8xf32> {cpc.name = "h"})
// CHECK-SAME: attributes {cpc.phase = #cpc.phase<forward>, cpc.pipeline_chunk = 0 : i64, cpc.pipeline_rank = 0 : i64}
// CHECK: %[[H:.*]] = cpc.matmul
// CHECK-NEXT: cpc.send %[[H]] to @mesh ["pp" = 1] channel 0 : tensor<2x8xf32>
// CHECK-LABEL: func.func @forward_1() -> (tensor<f32> {cpc.name = "loss"})
// CHECK-SAME: attributes {cpc.phase = #cpc.phase<forward>, cpc.pipeline_chunk = 1 : i64, cpc.pipeline_rank = 1 : i64}
// CHECK: cpc.recv from @mesh ["pp" = 0] channel 0
// CHECK-NOT: func.func @backward
// CHECK-NOT: func.func @apply
// CHECK-NOT: func.func @main
cpc.variable @w1 trainable : tensor<4x8xf32>
cpc.variable @w2 trainable : tensor<8x3xf32>
func.func @main(%x: tensor<2x4xf32> {cpc.name = "x"}) -> (tensor<f32> {cpc.name = "loss"}, tensor<2x8xf32> {cpc.name = "h"}) {
  %w1 = cpc.parameter @w1 : tensor<4x8xf32>
  %h = cpc.matmul %x, %w1 : (tensor<2x4xf32>, tensor<4x8xf32>) -> tensor<2x8xf32> loc("fc1")
  %a = cpc.tanh %h : tensor<2x8xf32> loc("act")
  %w2 = cpc.parameter @w2 : tensor<8x3xf32>
  %y = cpc.matmul %a, %w2 : (tensor<2x8xf32>, tensor<8x3xf32>) -> tensor<2x3xf32> loc("fc2")
  %l = cpc.reduce_mean %y {axes = array<i64: 0, 1>, keepdims = false} : tensor<2x3xf32> -> tensor<f32> loc("loss")
  return %l, %h : tensor<f32>, tensor<2x8xf32>
}
