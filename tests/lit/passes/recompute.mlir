// RUN: cpc-opt %s --cpc-recompute=mode=full | FileCheck %s
// RUN: cpc-opt %s --cpc-recompute=mode=full | FileCheck %s --check-prefix=NOLABEL
// RUN: cpc-opt %s --cpc-recompute=mode=selective | FileCheck %s --check-prefix=SELECTIVE
// RUN: cpc-opt %S/recompute-segments.mlir --cpc-training-pipeline='recompute=full' | FileCheck %s --check-prefix=BLOCKS
// RUN: cpc-opt %S/recompute-segments.mlir --cpc-training-pipeline='recompute=selective' | FileCheck %s --check-prefix=CHEAP
// RUN: cpc-opt %S/recompute-segments.mlir --cpc-training-pipeline='recompute=full pp=2' | FileCheck %s --check-prefix=PIPELINE

// Tests full recompute on per-rank IR: the unlabelled all_reduce belongs to segment 0 (its
// operand's), so the backward's read of its result is served by a copy of the matmul and the
// all_reduce, made right before that read; the parameter the matmul reads is gathered again
// (ZeRO-3's gathers: the forward's gathered copy then dies with the forward); tanh's result,
// which segment 1's forward reads, is a checkpoint and stays; segment 1, the last, is left
// alone.
// CHECK: module attributes {cpc.recomputed = {flops = 608 : i64, ops = 3 : i64}}
// CHECK: %[[P:.*]] = cpc.parameter @w
// CHECK: %[[W:.*]] = cpc.all_gather %[[P]]
// CHECK: %[[H:.*]] = cpc.matmul %arg0, %[[W]] :
// CHECK: %[[R:.*]] = cpc.all_reduce %[[H]]
// CHECK: %[[A:.*]] = cpc.tanh %[[R]] :
// CHECK: %[[D1:.*]] = cpc.mul %arg1,
// CHECK-NEXT: %[[W2:.*]] = cpc.all_gather %[[P]]
// CHECK-NEXT: %[[H2:.*]] = cpc.matmul %arg0, %[[W2]] :
// CHECK-NEXT: %[[R2:.*]] = cpc.all_reduce %[[H2]]
// CHECK-NEXT: %[[D0:.*]] = cpc.mul %[[D1]], %[[R2]] :
// CHECK-NEXT: %[[D2:.*]] = cpc.mul %[[D0]], %[[A]] :
// An unmarked op after the backward has begun (a reshard partitioning made for a backward
// reader) is backward too: it reads the copy, and is not copied itself.
// CHECK-NEXT: %[[N:.*]] = cpc.neg %[[R2]] :
// CHECK-NEXT: cpc.mul %[[D2]], %[[N]] :
// The labels are gone from every op (no pipeline stages: the backward marks too).
// NOLABEL-NOT: cpc.recompute_segment
// NOLABEL-NOT: cpc.backward

// Tests that selective recompute keeps what a GEMM or a collective computes: nothing to do here.
// SELECTIVE: cpc.recomputed = {flops = 0 : i64, ops = 0 : i64}
// SELECTIVE: cpc.all_reduce
// SELECTIVE-NOT: cpc.all_reduce

// Tests the training pipeline on three residual MLP blocks (recompute-segments.mlir): blocks 0
// and 1 run their first matmul and tanh again, block 1's before block 0's, each right before its
// weight gradient reads the tanh; block 2 (the last segment) and the block sums (checkpoints)
// are not computed again.
// BLOCKS: cpc.recomputed = {flops = 2176 : i64, ops = 4 : i64}
// BLOCKS: %[[X1:.*]] = cpc.add %arg0,
// BLOCKS: %[[W1:.*]] = cpc.parameter @w1_in
// BLOCKS: cpc.reduce_mean
// BLOCKS: %[[H1:.*]] = cpc.matmul %[[X1]], %[[W1]] :
// BLOCKS-NEXT: %[[A1:.*]] = cpc.tanh %[[H1]] :
// BLOCKS-NEXT: cpc.matmul %[[A1]], %{{.*}} {transpose_lhs = true}
// BLOCKS: %[[H0:.*]] = cpc.matmul %arg0, %{{.*}} :
// BLOCKS-NEXT: %[[A0:.*]] = cpc.tanh %[[H0]] :
// BLOCKS-NEXT: cpc.matmul %[[A0]], %{{.*}} {transpose_lhs = true}
// BLOCKS-NOT: cpc.tanh
// BLOCKS: cpc.multi_tensor_adamw

// Tests selective recompute in the pipeline: only the tanh of blocks 0 and 1 runs again (from
// the matmul output, which is kept).
// CHEAP: cpc.recomputed = {flops = 128 : i64, ops = 2 : i64}

// Tests that with pipeline stages the copies are backward ops of their chunk: block 0's tanh
// runs in @forward_0 and again in @backward_0, so @forward_0 hands two values to @backward_0
// (without recompute three: block 0's tanh output too).
// PIPELINE: func.func @forward_0(%{{.*}}) -> (tensor<4x16xf32> {cpc.transfer = {{[0-9]+}} : i64}, tensor<4x8xf32> {cpc.transfer = {{[0-9]+}} : i64}) attributes
// PIPELINE: cpc.tanh
// PIPELINE-LABEL: func.func @backward_0
// PIPELINE: %[[H:.*]] = cpc.matmul %arg{{[0-9]+}}, %{{[0-9]+}} :
// PIPELINE-NEXT: %[[A:.*]] = cpc.tanh %[[H]] :
// PIPELINE-NEXT: cpc.matmul %[[A]], %{{.*}} {transpose_lhs = true}
// PIPELINE-LABEL: func.func @forward_1

cpc.mesh @mesh shape = [2] axes = ["tp"]
cpc.variable @w trainable : tensor<4x8xf32>
func.func @train_step(%x: tensor<4x8xf32>, %g: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) attributes {cpc.phase = #cpc.phase<train_step>} {
  %p = cpc.parameter @w : tensor<4x8xf32>
  %w = cpc.all_gather %p over @mesh ["tp"] : tensor<4x8xf32> -> tensor<8x8xf32>
  %h = cpc.matmul %x, %w {cpc.recompute_segment = 0 : i64} : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %r = cpc.all_reduce %h over @mesh ["tp"] {kind = #cpc.reduction<sum>} : tensor<4x8xf32>
  %a = cpc.tanh %r {cpc.recompute_segment = 0 : i64} : tensor<4x8xf32>
  %y = cpc.add %a, %x {cpc.recompute_segment = 1 : i64} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %z = cpc.tanh %y {cpc.recompute_segment = 1 : i64} : tensor<4x8xf32>
  %d1 = cpc.mul %g, %z {cpc.backward, cpc.recompute_segment = 1 : i64} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %d0 = cpc.mul %d1, %r {cpc.backward, cpc.recompute_segment = 0 : i64} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %d2 = cpc.mul %d0, %a : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %n = cpc.neg %r : tensor<4x8xf32>
  %d3 = cpc.mul %d2, %n : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %d0, %d3 : tensor<4x8xf32>, tensor<4x8xf32>
}
