// RUN: cpc-opt %s --cpc-inference-program | FileCheck %s
// RUN: cpc-opt %s --cpc-inference-program --cpc-data-parallel=size=2 | FileCheck %s --check-prefix=DP
// RUN: cpc-opt %s --cpc-inference-program --cpc-tensor-parallel=tp=2 --cpc-data-parallel=size=1 | FileCheck %s --check-prefix=TP
// RUN: not cpc-opt %s --cpc-inference-program=func=nothing 2>&1 | FileCheck %s --check-prefix=BAD

// Tests that the model function becomes the inference program by its role attribute.
// CHECK: func.func @main
// CHECK-SAME: attributes {cpc.phase = #cpc.phase<infer>}

// Tests that data parallelism shards the inference program's batch and returns its outputs
// whole: the rows all-gathered, the mean's partial sum all-reduced.
// DP-LABEL: func.func @main
// DP-SAME: %{{.*}}: tensor<2x4xf32> {cpc.name = "x", cpc.sharding = #cpc.sharding<@mesh, {{\[\[}}"dp"], []]>}
// DP-SAME: -> (tensor<f32> {cpc.name = "loss"}, tensor<4x3xf32> {cpc.name = "y"})
// DP: %[[LOSS:.*]] = cpc.all_reduce %{{.*}} over @mesh ["dp"] : tensor<f32>
// DP: %[[Y:.*]] = cpc.all_gather %{{.*}} over @mesh ["dp"] {{.*}}: tensor<2x3xf32> -> tensor<4x3xf32>
// DP: return %[[LOSS]], %[[Y]]

// Tests that Megatron's MLP split (fc1 column-, fc2 row-parallel) reduces fc2's partial sum
// before the outputs: both are whole on every tp rank.
// TP-LABEL: func.func @main
// TP-SAME: -> (tensor<f32> {cpc.name = "loss"}, tensor<4x3xf32> {cpc.name = "y"})
// TP: cpc.matmul %{{.*}} : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
// TP: %[[Y:.*]] = cpc.all_reduce %{{.*}} over @mesh ["tp"] : tensor<4x3xf32>
// TP: return %{{.*}}, %[[Y]]

// Tests that a missing function is named.
// BAD: cpc-inference-program: no function @nothing
cpc.variable @fc1.weight trainable : tensor<4x8xf32>
cpc.variable @fc2.weight trainable : tensor<8x3xf32>
func.func @main(%x: tensor<4x4xf32> {cpc.name = "x"}) -> (tensor<f32> {cpc.name = "loss"}, tensor<4x3xf32> {cpc.name = "y"}) {
  %w1 = cpc.parameter @fc1.weight : tensor<4x8xf32>
  %h = cpc.matmul %x, %w1 : (tensor<4x4xf32>, tensor<4x8xf32>) -> tensor<4x8xf32> loc("fc1")
  %a = cpc.gelu %h : tensor<4x8xf32> loc("act")
  %w2 = cpc.parameter @fc2.weight : tensor<8x3xf32>
  %y = cpc.matmul %a, %w2 : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32> loc("fc2")
  %l = cpc.reduce_mean %y {axes = array<i64: 0, 1>, keepdims = false} : tensor<4x3xf32> -> tensor<f32> loc("loss")
  return %l, %y : tensor<f32>, tensor<4x3xf32>
}
