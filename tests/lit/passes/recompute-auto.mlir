// RUN: cpc-opt %s --cpc-recompute='mode=auto bytes=1' | FileCheck %s
// RUN: cpc-opt %s --cpc-recompute='mode=auto bytes=1000' | FileCheck %s --check-prefix=ALL
// RUN: cpc-opt %S/recompute-segments.mlir --cpc-training-pipeline='recompute=auto recompute-bytes=1' | FileCheck %s --check-prefix=PIPELINE

// Tests that auto frees the cheapest bytes first: of segment 0's three 256 B values the backward
// reads, tanh's output is computed again from the matmul's (kept), which costs one tanh; the
// matmul does not run again. Freeing one byte of the backward's peak (1024 B: segment 0's 768 B
// kept while the last segment's 256 B are live) takes one value.
// CHECK: module attributes {cpc.recomputed = {flops = 64 : i64, ops = 1 : i64}}
// CHECK: %[[H:.*]] = cpc.matmul
// CHECK: %[[A:.*]] = cpc.tanh %[[H]]
// CHECK: %[[E:.*]] = cpc.exp %[[A]]
// CHECK: %[[B2:.*]] = cpc.mul %{{.*}}, %[[E]]
// CHECK-NEXT: %[[A2:.*]] = cpc.tanh %[[H]]
// CHECK-NEXT: %[[B3:.*]] = cpc.mul %[[B2]], %[[A2]]
// CHECK-NEXT: cpc.mul %[[B3]], %[[H]]

// Tests that more bytes than the greedy can free recompute everything the backward reads, as
// full does: the matmul, tanh and exp run again.
// ALL: cpc.recomputed = {flops = 2176 : i64, ops = 3 : i64}

// Tests auto in the training pipeline on three residual MLP blocks: one byte is freed by one
// block's tanh, computed again from its first matmul (the tanh's operand is not kept, so the
// matmul runs again too: half of full's 4 ops).
// PIPELINE: cpc.recomputed = {flops = 1088 : i64, ops = 2 : i64}
cpc.variable @w trainable : tensor<16x16xf32>
func.func @train_step(%x: tensor<4x16xf32>, %g: tensor<4x16xf32>) -> tensor<4x16xf32> attributes {cpc.phase = #cpc.phase<train_step>} {
  %w = cpc.parameter @w : tensor<16x16xf32>
  %h = cpc.matmul %x, %w {cpc.recompute_segment = 0 : i64} : (tensor<4x16xf32>, tensor<16x16xf32>) -> tensor<4x16xf32>
  %a = cpc.tanh %h {cpc.recompute_segment = 0 : i64} : tensor<4x16xf32>
  %e = cpc.exp %a {cpc.recompute_segment = 0 : i64} : tensor<4x16xf32>
  %z = cpc.tanh %x {cpc.recompute_segment = 1 : i64} : tensor<4x16xf32>
  %b1 = cpc.mul %g, %z {cpc.backward} : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %b2 = cpc.mul %b1, %e : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %b3 = cpc.mul %b2, %a : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %b4 = cpc.mul %b3, %h : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  return %b4 : tensor<4x16xf32>
}
